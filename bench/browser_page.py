"""The live page as people see it: `streamlit run` (as `make run` starts it) driven by Chromium.

Beside it, in the same invocation, a headless worker runs the very same generation the way
`kvviz record` does (bench.headless_worker), at the same torch thread count as the server. Rounds
interleave page with the race off, headless, page with the race on, each round in another order.
Two setups (`PageBench`): the default model (50-70 ms a step on a 2-core CPU) and a fast tiny
model (bench.fast_model: ~3 ms a step, the regime of a GPU), where the page's drawing competes
with the model for the interpreter. From each page run the benchmark reads

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
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

from bench.machine import wait_until_quiet
from bench.results import Result, medians, spread
from bench.settings import Settings
from bench.app_server import CHROMIUM, IDLE, chromium_context
from bench.app_server import Server as AppServer
from bench.subproc import bench_env

PORTS = range(8620, 8630)  # the benchmark's own servers
VIEWPORT = {"width": 1600, "height": 1200}
LOAD_MS = 600_000  # the page's first model load, on a busy machine
RUN_MS = 900_000  # one run with the race on
WALL_TARGET, RACE_TARGET = 0.8, 1.10
OWN_WALL_TARGET = 0.9  # the page's wall-clock tokens/s over its own compute-only tokens/s, race off
DEFAULT_COMPUTE_TARGET = 0.95  # the page's compute-only tokens/s over headless's, default model on CPU
FAST_COMPUTE_TARGET = 0.9  # the same on a fast engine (the fast model here, a GPU: scripts/gpu_check.py)
FRAME_S = 1 / 60  # one display frame
QUIET_MAX_S = 8.0  # the longest a run waits for quiet cores (bench.machine.wait_until_quiet)


@dataclass(frozen=True)
class PageBench:
    """One setup of the benchmark: which model, how many tokens a run, its compute target."""

    label: str  # in every row's name: "default model", "fast model"
    model: str | None  # a local folder, or None: the default model
    tokens: int  # max new tokens per run (`?max_new=`)
    reps: int  # measured rounds after the warm-up round
    compute_target: float  # the page's compute-only tokens/s over headless's, at least
    prompt: str | None = None  # the prompt box's text (`?prompt=`), or None: the preset's own


# The default preset's question ends at the model's EOS after about 28 tokens (2 s): too short a
# run for one slow round to weigh little. This one runs the whole `max_new` on the default model.
LONG_ANSWER = "Explain in detail, step by step, how a KV cache speeds up text generation in a transformer."


def default_bench(s: Settings, model: str | None = None) -> PageBench:
    """The default model, like for like with headless (tests pass a tiny model's folder)."""
    return PageBench("default model", model, s.new_tokens, s.browser_reps, DEFAULT_COMPUTE_TARGET, LONG_ANSWER)


def fast_bench(s: Settings) -> PageBench:
    """The fast tiny model (bench.fast_model), built on first use: the GPU's regime on this CPU."""
    from bench.fast_model import fast_model_dir
    return PageBench("fast model", str(fast_model_dir()), s.fast_tokens, s.fast_browser_reps, FAST_COMPUTE_TARGET)

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


def busy_tokens_per_s(step_ms: list[float], phases: list[str]) -> float:
    """Decode tokens per second of the steps' own time: 1000 / the mean decode step. The wall clock
    can reach it only if nothing happens between steps; the median (compute_tokens_per_s) leaves
    out the slow steps, which the wall clock pays like everyone else."""
    return 1e3 / statistics.mean(ms for ms, phase in zip(step_ms, phases) if phase == "decode")


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

    def run(self, fields: dict, race: bool = False) -> dict:
        self.proc.stdin.write(json.dumps({"config": fields, "race": race}) + "\n")
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


def open_page(context, url: str, race: bool, new_tokens: int, prompt: str | None = None):
    """A browser tab on the live page (its own session) with `prompt` in its box (None: the
    preset's own), the model loaded, the script idle."""
    from playwright.sync_api import expect
    page = context.new_page()
    query = {"max_new": new_tokens, "race": "true" if race else "false", **({"prompt": prompt} if prompt else {})}
    page.goto(f"{url}/?{urlencode(query)}")
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
            "busy": busy_tokens_per_s(run["step_ms"], run["phases"]),
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


ORDER = ("page", "race", "headless", "headless race")  # a round's runs: each race on / off pair back to back
SIDES = ("page", "headless", "race", "headless race")  # the same runs, as the rows pair them


def round_order(round_: int) -> list[str]:
    """The order of round `round_`'s runs: ORDER, then reversed every other round (ABBA), so that
    a load that grows or fades during the benchmark weighs on both sides of every row alike, and
    the two runs of each race on / off ratio are always neighbours (rotated rounds put them up to
    two runs apart: the fast model's race row, a ratio of two such ratios, read 0.94–1.25)."""
    return list(ORDER if round_ % 2 == 0 else ORDER[::-1])


def measure_rounds(bench: PageBench, context, url: str, headless: Headless) -> dict[str, list[dict]]:
    """A warm-up round, then `bench.reps` interleaved rounds of page (race off), headless, page (race
    on) and headless with the race."""
    tabs = {name: open_page(context, url, race, bench.tokens, bench.prompt)
            for name, race in (("page", False), ("race", True))}
    samples: dict = {name: [] for name in ORDER}
    config = None
    for round_ in range(bench.reps + 1):
        for name in round_order(round_):
            wait_until_quiet(max_s=QUIET_MAX_S)  # no run starts beside the previous one's last drawing
            if name in tabs:
                run, moments = seen_page_run(tabs[name])
                config, sample = config or run["config"], {**rates(run, moments), "click_to_idle_s": run["click_to_idle_s"]}
                samples["tokens"] = len(run["texts"])
            else:
                config = config or seen_page_run(tabs["page"])[0]["config"]  # the page's own config
                alone = headless.run(config, race=name == "headless race")
                sample = {**rates(alone, alone["stamps_s"]), "total_s": alone["stamps_s"][-1]}
            if round_:  # round 0 warms up every path
                samples[name].append(sample)
    samples["prompt"] = config["prompts"][0]  # as the page's trace records it
    return samples


def browser_vs_headless(s: Settings, bench: PageBench | None = None) -> tuple[list[Result], str]:
    """The rows and the method of one setup (default: the default model)."""
    from bench.app_server import shared_playwright
    bench = bench or default_bench(s)
    if not CHROMIUM.exists():
        raise RuntimeError(f"{CHROMIUM} is missing: the live-page benchmark needs Debian's chromium")
    with Server({"KVVIZ_MODEL": bench.model} if bench.model else None) as server, Headless(bench.model) as headless, \
            shared_playwright() as pw, tempfile.TemporaryDirectory(prefix="kvviz-bench-chromium-") as profile:
        context = chromium_context(pw, profile, VIEWPORT)
        try:
            samples = measure_rounds(bench, context, server.url, headless)
        finally:
            context.close()
        versions = {"headless torch threads": headless.ready["torch_threads"],
                    "server torch threads": server_threads(headless.ready["torch_default"]),
                    "torch default": headless.ready["torch_default"]}
    return browser_rows(samples, bench, versions), browser_method(bench, samples, versions)


def server_threads(torch_default: int) -> int | str:
    """The torch threads kvviz's thread policy gives the server here (kvviz.app.threads)."""
    from kvviz.app.threads import torch_threads
    from kvviz.core.errors import UserError
    try:
        return torch_threads(os.cpu_count() or 1, torch_default)
    except UserError as exc:
        return str(exc)


def of(samples: list[dict], key: str) -> list[float]:
    return [x[key] for x in samples]


def paired(over: list[dict], under: list[dict], key: str, under_key: str | None = None) -> float:
    """The median over rounds of each round's own ratio over[i][key] / under[i][under_key or key]:
    the runs of a round ran one after the other, so a load that comes and goes during the benchmark
    weighs on both sides of each ratio (a ratio of medians can pair a quiet run with a loaded one)."""
    return statistics.median(a[key] / b[under_key or key] for a, b in zip(over, under))


def race_cost(race: dict, alone: dict) -> float:
    """What the race costs the cached run: its median decode step with the race over without."""
    return race["step_ms"] / alone["step_ms"]


def browser_rows(samples: dict, bench: PageBench, versions: dict) -> list[Result]:
    m = {name: medians({k: of(samples[name], k) for k in samples[name][0]}) for name in ORDER}
    page, alone, race, alone_race = m["page"], m["headless"], m["race"], m["headless race"]
    pages, heads, races, head_races = (samples[name] for name in SIDES)
    page_costs = [race_cost(r, p) for r, p in zip(races, pages)]
    head_costs = [race_cost(r, h) for r, h in zip(head_races, heads)]
    on = f"{bench.label}, {threads_in_words(versions)}"
    return [
        Result(f"Live page in Chromium / headless `kvviz record` ({on}): compute-only decode tokens/s "
               "(forward + sampling per step)", f"{page['compute']:.2f} tok/s", f"{alone['compute']:.2f} tok/s",
               paired(pages, heads, "compute"), ">=", bench.compute_target),
        Result(f"Live page in Chromium / headless ({on}): wall-clock decode tokens/s (text on screen / "
               "events yielded)", f"{page['wall']:.2f} tok/s", f"{alone['wall']:.2f} tok/s",
               paired(pages, heads, "wall"), ">=", WALL_TARGET),
        Result(f"Live page in Chromium, race off ({bench.label}): wall-clock / its own steps' decode "
               "tokens/s (1000 / mean step: drawing never holds back the model)", f"{page['wall']:.2f} tok/s",
               f"{page['busy']:.2f} tok/s", paired(pages, pages, "wall", "busy"), ">=", OWN_WALL_TARGET),
        Result(f"Headless `kvviz record` ({bench.label}): wall-clock / its own steps' decode tokens/s (the "
               "engine's own work between steps: the most the row above can reach)", f"{alone['wall']:.2f} tok/s",
               f"{alone['busy']:.2f} tok/s", paired(heads, heads, "wall", "busy"), None, None),
        Result(f"Live page, race on / race off ({bench.label}): cached decode step (median)", f"{race['step_ms']:.2f} ms",
               f"{page['step_ms']:.2f} ms", statistics.median(page_costs), None, None),
        Result(f"Headless, race on / race off ({bench.label}): cached decode step (median) taking turns with the "
               "recompute run, no page (the race's own cost on this device)", f"{alone_race['step_ms']:.2f} ms",
               f"{alone['step_ms']:.2f} ms", statistics.median(head_costs), None, None),
        Result(f"Race on / off, live page / headless ({bench.label}): what the page adds to the race's own cost",
               f"{statistics.median(page_costs):.3f}×", f"{statistics.median(head_costs):.3f}×",
               statistics.median(p / h for p, h in zip(page_costs, head_costs)), "<=", RACE_TARGET),
        Result(f"Live page click → page finished / headless whole run ({bench.label})", f"{page['click_to_idle_s']:.2f} s",
               f"{alone['total_s']:.2f} s", paired(pages, heads, "click_to_idle_s", "total_s"), None, None),
    ]


def threads_in_words(versions: dict) -> str:
    """"both at 1 torch thread", or what differs (the rows then do not compare like for like)."""
    server, alone = versions["server torch threads"], versions["headless torch threads"]
    if server == alone:
        return f"both at {server} torch thread{'s' if server != 1 else ''}"
    return f"page at {server}, headless at {alone} torch threads"


def browser_method(bench: PageBench, samples: dict, versions: dict) -> str:
    page, alone, race, alone_race = (samples[name] for name in SIDES)
    model = ("the default model" if bench.model is None else
             "the fast tiny model of `bench/fast_model.py` (a random Llama, 4 layers, hidden 64, SmolLM2's "
             "tokenizer and chat template: a few milliseconds a step on one core, as the default model "
             "takes on a GPU; the page's drawing then competes with the model for the interpreter)")
    return (
        "`streamlit run app.py --server.port 862x` from the repository root (as `make run` starts "
        "it, so `.streamlit/config.toml` applies: file watcher off), and Debian's Chromium driven by "
        "playwright on the same machine and cores. Two tabs (two sessions) open the live page with "
        f"`?max_new={bench.tokens}`, one with the race off and one with it on; "
        f"the prompt {samples['prompt']!r} (as the page's trace records it), "
        f"{model}; the server's torch threads by kvviz's policy: "
        f"{versions['server torch threads']} (torch's default here: {versions['torch default']}). A headless "
        "worker process runs the same generation as `kvviz record` does (the engine's cached mode) with the "
        f"server's thread policy, {versions['headless torch threads']} thread(s), so that the ratios measure "
        "what the page costs the model and not the policy (that is `--only live-threads`), with the very "
        "config the page's trace records. "
        f"One warm-up round, then {bench.reps} rounds of page (race off), page (race on), headless and "
        "headless with the race (the same `race.interleave` of the cached and recompute runs, in one thread), every "
        "other round in the reverse order (ABBA: each race on / off pair runs back to back); each run starts once the cores have been at least 85 % idle over half a second (at most "
        f"{QUIET_MAX_S:.0f} s later: a finished page's browser and server go on drawing for a second or two, which a run started at once would share its cores with). The Measured and Baseline columns give each side's median over "
        "the rounds; each ratio is the median over rounds of that round's own ratio (its runs ran one after "
        "the other, so a load that comes and goes weighs on both sides). **Compute-only** tokens/s is 1000 / the median decode step time "
        "(forward + sampling, as the page's trace records it and its Decode step (median) figure "
        "shows it); the rows of wall-clock over a run's own steps divide by 1000 / the mean decode step instead, since the wall clock pays the slow steps the median leaves out, so that what they compare is the time between steps. **Wall-clock** tokens/s counts the tokens between the first and the last one "
        "that added text over the time between them: on the page, when the text reached that "
        "length on screen (a MutationObserver in the page); headless, when the engine yielded it. "
        "**Race on / off** compares the cached run's median decode step with the race and without, on the "
        "two tabs and headless. Two models taking turns on one device slow each other with no page at all "
        "(on a CPU each evicts the other's weights and cache from the processor's caches), so the target "
        "is on the page's race cost over headless's: what the page adds to the race. The headless "
        "wall-clock row is the page's wall-clock row for headless: the engine's work between steps (the "
        "cache probe, the text, the event) is outside the step time, so neither reaches 1. "
        f"Page (race off): compute {spread(of(page, 'compute'))}, steps {spread(of(page, 'busy'))}, wall {spread(of(page, 'wall'))} tok/s, "
        f"click to finished {spread(of(page, 'click_to_idle_s'))} s. Headless: compute "
        f"{spread(of(alone, 'compute'))}, steps {spread(of(alone, 'busy'))}, wall {spread(of(alone, 'wall'))} tok/s, whole run "
        f"{spread(of(alone, 'total_s'))} s. Race on: cached step {spread(of(race, 'step_ms'))} ms "
        f"against {spread(of(page, 'step_ms'))} ms with it off; headless {spread(of(alone_race, 'step_ms'))} ms "
        f"against {spread(of(alone, 'step_ms'))} ms; {samples['tokens']} tokens per run.")


if __name__ == "__main__":  # `python -m bench.browser_page [reps] [new_tokens] [fast]`: a quick look
    args = sys.argv[1:]
    quick = Settings(browser_reps=int(args[0]) if args else 1, new_tokens=int(args[1]) if len(args) > 1 else 16)
    quick = Settings(**{**quick.__dict__, "fast_browser_reps": quick.browser_reps, "fast_tokens": quick.new_tokens})
    rows, method = browser_vs_headless(quick, fast_bench(quick) if "fast" in args[2:] else None)
    from bench.results import render_table
    print(render_table(rows))
    print(method)
