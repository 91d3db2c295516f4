"""The live page as people see it: `streamlit run` (as `make run` starts it) driven by Chromium.

Beside it, in the same invocation, a headless worker runs the very same generation the way
`kvviz record` does (bench.headless_worker). Rounds interleave: page with the race off,
headless, page with the race on. From each page run the benchmark reads

- the trace the page offers for download (the run's own step times: forward + sampling), and
- when the streamed text changed on screen, from a MutationObserver in the page,

and from each headless run the step times and the moment each event was yielded.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.results import Result, medians, spread
from bench.settings import Settings
from bench.app_server import CHROMIUM, IDLE, chromium_context
from bench.app_server import Server as AppServer
from bench.subproc import bench_env

PORTS = range(8620, 8630)  # the benchmark's own servers
VIEWPORT = {"width": 1600, "height": 1200}
LOAD_MS = 600_000  # the page's first model load, on a busy machine
RUN_MS = 900_000  # one run with the race on
COMPUTE_TARGET, WALL_TARGET, RACE_TARGET = 0.9, 0.8, 1.10
OWN_WALL_TARGET = 0.9  # the page's wall-clock tokens/s over its own compute-only tokens/s, race off
FRAME_S = 1 / 60  # one display frame

# Notes every change of the cached panel's text length and the script's run state, with the
# page's own clock, from just before Generate is clicked.
OBSERVE_JS = """() => {
  const rec = {t0: performance.now(), marks: [], running: null, idle: null};
  const app = document.querySelector("[data-testid='stApp']");
  const read = () => {
    const el = document.querySelector(".st-key-cached-panel [data-testid='stCode'] code");
    if (!el) return -1;
    const text = el.textContent;
    return text.trim() === '' ? 0 : text.length;  // the blank placeholder (" ") is no text
  };
  let last = read();
  const seen = () => {
    const now = performance.now(), n = read(), state = app.getAttribute('data-test-script-state');
    if (n !== last) { last = n; rec.marks.push([now, n]); }
    if (state === 'running' && rec.running === null) rec.running = now;
    if (state === 'notRunning' && rec.running !== null && rec.idle === null) rec.idle = now;
  };
  const obs = new MutationObserver(seen);
  obs.observe(document.body, {subtree: true, childList: true, characterData: true,
                              attributes: true, attributeFilter: ['data-test-script-state']});
  window.__kvbench = rec;
  window.__kvbenchStop = () => obs.disconnect();
}"""


# ---- pure: rates from step times and from moments -----------------------------------------

def compute_tokens_per_s(step_ms: list[float], phases: list[str]) -> float:
    """Decode tokens per second of compute alone: 1000 / the median decode step (forward + sampling)."""
    return 1e3 / statistics.median(ms for ms, phase in zip(step_ms, phases) if phase == "decode")


def wall_tokens_per_s(moments_s: list[float | None], texts: list[str]) -> float:
    """Tokens per second of wall clock from the first token with text to the last one.

    `moments_s[i]`: when event i's text was out (yielded headless, or on screen in the page).
    Tokens that add no text (some byte pieces, EOS) cannot be seen, so the span runs between
    the first and the last token that added text, and counts the tokens in between. A span
    shorter than one display frame (a tiny model: every token in one frame) counts as a frame.
    """
    shown = [i for i, text in enumerate(texts) if text and moments_s[i] is not None]
    first, last = shown[0], shown[-1]
    return (last - first) / max(moments_s[last] - moments_s[first], FRAME_S)


def screen_moments(marks: list[list[float]], texts: list[str]) -> list[float | None]:
    """When each event's text was first on screen (seconds), from the (ms, text length) marks.

    The page shows the concatenated text; event i is on screen once the length reaches the
    length of texts[0..i]. Lengths are aligned on the final one (the code element may add a
    fixed suffix). None for an event whose length never showed (a coalesced frame shows a later one).
    """
    lengths = [len("".join(texts[:i + 1])) for i in range(len(texts))]
    offset = marks[-1][1] - lengths[-1] if marks else 0
    moments: list[float | None] = []
    for length in lengths:
        hit = next((t for t, n in marks if n - offset >= length), None) if length else None
        moments.append(None if hit is None else hit / 1e3)
    return moments


# ---- the server, the worker and the browser ------------------------------------------------

class Server(AppServer):
    """`streamlit run app.py` as `make run` starts it, on one of the benchmark's own ports."""

    def __init__(self, env_extra: dict | None = None):
        super().__init__(env_extra, PORTS)


class Headless:
    """The headless worker process: `run(config fields)` → its stamped events."""

    def __init__(self, model: str | None = None):
        self.args = [model] if model else []

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.headless_worker", *self.args],
                                     env=bench_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.ready = self.read()
        return self

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the headless worker exited ({self.proc.poll()})")
        return json.loads(line)

    def run(self, fields: dict) -> dict:
        self.proc.stdin.write(json.dumps(fields) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def __exit__(self, *exc):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)
        return False


def open_page(context, url: str, race: bool, new_tokens: int):
    """A browser tab on the live page (its own session), the model loaded, the script idle."""
    from playwright.sync_api import expect
    page = context.new_page()
    page.goto(f"{url}/?max_new={new_tokens}&race={'true' if race else 'false'}")
    expect(page.get_by_role("button", name="Generate")).to_be_enabled(timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    return page


def page_run(page) -> dict:
    """Click Generate, wait for the page to finish; what the screen showed and the page's trace."""
    page.evaluate(OBSERVE_JS)
    page.get_by_role("button", name="Generate").click()
    page.wait_for_function("() => window.__kvbench.idle !== null", timeout=RUN_MS, polling=250)
    rec = page.evaluate("() => { window.__kvbenchStop(); return window.__kvbench; }")
    with page.expect_download(timeout=RUN_MS) as download:
        page.locator(".st-key-dl-trace button").click()
    doc = json.loads(Path(download.value.path()).read_text())
    page.wait_for_selector(IDLE, timeout=RUN_MS)
    cached = [e for e in doc["events"] if e["mode"] == "cached"]
    marks = [[t - rec["t0"], n] for t, n in rec["marks"] if t >= rec["running"]]
    return {"config": doc["meta"]["config"], "step_ms": [e["step_ms"] for e in cached],
            "phases": [e["phase"] for e in cached], "texts": [e["texts"][0] for e in cached],
            "marks": marks, "click_to_idle_s": (rec["idle"] - rec["t0"]) / 1e3}


def rates(run: dict, moments_s: list[float | None]) -> dict:
    return {"compute": compute_tokens_per_s(run["step_ms"], run["phases"]),
            "wall": wall_tokens_per_s(moments_s, run["texts"]),
            "step_ms": statistics.median(ms for ms, p in zip(run["step_ms"], run["phases"]) if p == "decode")}


# ---- the benchmark --------------------------------------------------------------------------

SEEN_TRIES = 3  # a page run whose text the observer never saw on screen is measured again


def seen_page_run(handle) -> tuple[dict, list[float | None]]:
    """A page run and its screen moments; a run in which no token's text was seen appearing (a
    loaded machine can show the whole text in the frame that ends the run) is not a measurement
    and is taken again, at most SEEN_TRIES times."""
    for _ in range(SEEN_TRIES):
        run = page_run(handle)
        moments = screen_moments(run["marks"], run["texts"])
        if any(m is not None and text for m, text in zip(moments, run["texts"])):
            return run, moments
    raise RuntimeError(f"no token's text was seen appearing on the page in {SEEN_TRIES} runs")


def measure_rounds(s: Settings, context, url: str, headless: Headless) -> dict[str, list[dict]]:
    """A warm-up round, then `s.browser_reps` interleaved rounds: page (race off), headless, page (race on)."""
    off, on = (open_page(context, url, race, s.new_tokens) for race in (False, True))
    samples: dict[str, list[dict]] = {"page": [], "headless": [], "race": []}
    for round_ in range(s.browser_reps + 1):
        page, page_moments = seen_page_run(off)
        alone = headless.run(page["config"])
        raced, raced_moments = seen_page_run(on)
        if round_:  # round 0 warms up every path
            samples["page"].append({**rates(page, page_moments), "click_to_idle_s": page["click_to_idle_s"]})
            samples["headless"].append({**rates(alone, alone["stamps_s"]), "total_s": alone["stamps_s"][-1]})
            samples["race"].append(rates(raced, raced_moments))
    samples["tokens"] = len(page["texts"])
    return samples


def browser_vs_headless(s: Settings, model: str | None = None) -> tuple[list[Result], str]:
    """The rows and the method; on the default model unless `model` names another (tests: a tiny one)."""
    from bench.app_server import shared_playwright
    if not CHROMIUM.exists():
        raise RuntimeError(f"{CHROMIUM} is missing: the live-page benchmark needs Debian's chromium")
    with Server({"KVVIZ_MODEL": model} if model else None) as server, Headless(model) as headless, shared_playwright() as pw, \
            tempfile.TemporaryDirectory(prefix="kvviz-bench-chromium-") as profile:
        context = chromium_context(pw, profile, VIEWPORT)
        try:
            samples = measure_rounds(s, context, server.url, headless)
        finally:
            context.close()
        versions = {"headless torch threads": headless.ready["torch_threads"],
                    "server torch threads": server_threads(headless.ready["torch_default"]),
                    "torch default": headless.ready["torch_default"]}
    return browser_rows(samples), browser_method(s, samples, versions)


def server_threads(torch_default: int) -> int | str:
    """The torch threads kvviz's thread policy gives the server here (kvviz.app.threads)."""
    from kvviz.app.threads import torch_threads
    try:
        return torch_threads(os.cpu_count() or 1, torch_default)
    except ValueError as exc:
        return str(exc)


def of(samples: list[dict], key: str) -> list[float]:
    return [x[key] for x in samples]


def browser_rows(samples: dict) -> list[Result]:
    m = {name: medians({k: of(samples[name], k) for k in samples[name][0]}) for name in ("page", "headless", "race")}
    page, alone, race = m["page"], m["headless"], m["race"]
    return [
        Result("Live page in Chromium / headless `kvviz record`: compute-only decode tokens/s "
               "(forward + sampling per step)", f"{page['compute']:.2f} tok/s", f"{alone['compute']:.2f} tok/s",
               page["compute"] / alone["compute"], ">=", COMPUTE_TARGET),
        Result("Live page in Chromium / headless: wall-clock decode tokens/s (text on screen / "
               "events yielded)", f"{page['wall']:.2f} tok/s", f"{alone['wall']:.2f} tok/s",
               page["wall"] / alone["wall"], ">=", WALL_TARGET),
        Result("Live page in Chromium, race off: wall-clock / its own compute-only decode tokens/s "
               "(drawing never holds back the model)", f"{page['wall']:.2f} tok/s", f"{page['compute']:.2f} tok/s",
               page["wall"] / page["compute"], ">=", OWN_WALL_TARGET),
        Result("Live page, race on / race off: cached decode step (median)", f"{race['step_ms']:.1f} ms",
               f"{page['step_ms']:.1f} ms", race["step_ms"] / page["step_ms"], "<=", RACE_TARGET),
        Result("Live page click → page finished / headless whole run", f"{page['click_to_idle_s']:.2f} s",
               f"{alone['total_s']:.2f} s", page["click_to_idle_s"] / alone["total_s"], None, None),
    ]


def browser_method(s: Settings, samples: dict, versions: dict) -> str:
    page, alone, race = samples["page"], samples["headless"], samples["race"]
    return (
        "`streamlit run app.py --server.port 862x` from the repository root (as `make run` starts "
        "it, so `.streamlit/config.toml` applies: file watcher off), and Debian's Chromium driven by "
        "playwright on the same machine and cores. Two tabs (two sessions) open the live page with "
        f"`?max_new={s.new_tokens}`, one with the race off and one with it on; the default prompt and "
        "model; the server's torch threads by kvviz's policy: "
        f"{versions['server torch threads']} (torch's default here: {versions['torch default']}). A headless "
        "worker process runs the same generation as `kvviz record` does (the engine's cached mode) with the "
        f"server's thread policy, {versions['headless torch threads']} thread(s), so that the ratios measure "
        "what the page costs the model and not the policy (that is `--only live-threads`), with the very "
        "config the page's trace records. "
        f"One warm-up round, then {s.browser_reps} rounds of page (race off), headless, page (race on); "
        "ratios of medians. **Compute-only** tokens/s is 1000 / the median decode step time "
        "(forward + sampling, as the page's trace records it and its Decode step (median) figure "
        "shows it). **Wall-clock** tokens/s counts the tokens between the first and the last one "
        "that added text over the time between them: on the page, when the text reached that "
        "length on screen (a MutationObserver in the page); headless, when the engine yielded it. "
        "**Race on / off** compares the cached run's median decode step on the two tabs. "
        f"Page (race off): compute {spread(of(page, 'compute'))}, wall {spread(of(page, 'wall'))} tok/s, "
        f"click to finished {spread(of(page, 'click_to_idle_s'))} s. Headless: compute "
        f"{spread(of(alone, 'compute'))}, wall {spread(of(alone, 'wall'))} tok/s, whole run "
        f"{spread(of(alone, 'total_s'))} s. Race on: cached step {spread(of(race, 'step_ms'))} ms "
        f"against {spread(of(page, 'step_ms'))} ms with it off; {samples['tokens']} tokens per run.")


if __name__ == "__main__":  # `python -m bench.browser_page [reps] [new_tokens]`: a quick look
    args = [int(a) for a in sys.argv[1:]]
    rows, method = browser_vs_headless(Settings(browser_reps=args[0] if args else 1,
                                                new_tokens=args[1] if len(args) > 1 else 16))
    from bench.results import render_table
    print(render_table(rows))
    print(method)
