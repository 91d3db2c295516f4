"""`kvviz bench`: what kvviz's instrumentation and live page cost, measured side by side.

Every comparison runs its two variants in one process, interleaved (A, B, A, B, ...), and
reports the ratio of their medians against a target. With `--out` the results, the machine and
one paragraph of method per benchmark are written as Markdown (docs/benchmarks.md).

    python -m kvviz.cli bench [--quick] [--reps N] [--out docs/benchmarks.md]
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

APP = Path(__file__).resolve().parent.parent / "app.py"
OPS = {"<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b, ">": lambda a, b: a > b}
SIGNS = {"<=": "≤", ">=": "≥", ">": ">"}


@dataclass(frozen=True)
class Settings:
    """How much to measure; `QUICK` is a smoke test that ends in about a minute."""

    reps: int = 5  # interleaved repetitions of each A/B pair
    new_tokens: int = 64  # per run, for hooks, engine vs generate and the live page
    recompute_lengths: tuple[int, ...] = (32, 64, 128)  # new tokens, recompute vs cached
    recompute_reps: int = 3  # rounds of every length in both modes (minutes on CPU); --reps caps it
    cold_load: bool = True  # convert the default model into a fresh cache folder (≈ 40 s)
    load_reps: int = 3  # warm loads, each in a fresh subprocess
    soak_runs: int = 50  # consecutive live-page generations in one process


FULL = Settings()
QUICK = Settings(reps=3, new_tokens=16, recompute_lengths=(8, 16, 32), recompute_reps=1,
                 cold_load=False, load_reps=1, soak_runs=8)


@dataclass(frozen=True)
class Result:
    """One row of the table: `measured` compared with `baseline` as their ratio."""

    name: str  # what was compared
    measured: str  # the variant under test, formatted with its unit
    baseline: str  # what it is compared with, formatted with its unit
    ratio: float  # measured / baseline
    op: str | None  # "<=", ">=", ">" or None for a row without a target
    limit: float | None  # the target the ratio is checked against

    @property
    def passed(self) -> bool | None:
        return None if self.op is None else OPS[self.op](self.ratio, self.limit)

    @property
    def target(self) -> str:
        return "—" if self.op is None else f"{SIGNS[self.op]} {self.limit:.3g}"

    @property
    def verdict(self) -> str:
        return {True: "PASS", False: "FAIL", None: "info"}[self.passed]


# ---- pure helpers: repetitions, medians, rendering -------------------------------------------

def interleaved(variants: dict[str, Callable[[], float]], reps: int) -> dict[str, list[float]]:
    """Run the variants in turn, `reps` rounds (A, B, A, B, ...); every sample, per variant."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(reps):
        for name, measure in variants.items():
            samples[name].append(measure())
    return samples


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in samples.items()}


def spread(values: list[float], fmt: str = "{:.3g}") -> str:
    """`median (min–max, n=…)` of one variant's samples, for the method notes."""
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}–{fmt.format(max(values))}, n={len(values)})")


def render_table(results: list[Result]) -> str:
    rows = ["| Benchmark | Measured | Baseline | Ratio | Target | Result |",
            "|---|---|---|---|---|---|"]
    rows += [f"| {r.name} | {r.measured} | {r.baseline} | {r.ratio:.3f} | {r.target} | {r.verdict} |"
             for r in results]
    return "\n".join(rows)


def render_doc(machine: dict, command: str, when: str, results: list[Result],
               methods: list[tuple[str, str]]) -> str:
    """docs/benchmarks.md: machine, date, command, the table, one paragraph per benchmark."""
    lines = ["# Benchmarks", "",
             "Written by `kvviz bench` (`make bench`); every number below comes from one run of it.", "",
             f"- **Date:** {when}", f"- **Command:** `{command}`"]
    lines += [f"- **{key}:** {value}" for key, value in machine.items()]
    lines += ["", "## Results", "", render_table(results), "",
              "Each ratio compares the medians of interleaved repetitions (A, B, A, B, …) of its two "
              "variants, run side by side in one process; a row without a target is informational.", "", "## Method", ""]
    for title, text in methods:
        lines += [f"### {title}", "", text, ""]
    return "\n".join(lines)


def command_line(args) -> str:
    parts = ["python -m kvviz.cli bench"] + (["--quick"] if args.quick else [])
    parts += [f"--reps {args.reps}"] if args.reps else []
    parts += [f"--threads {args.threads}"] if getattr(args, "threads", None) else []
    return " ".join(parts + ([f"--out {args.out}"] if args.out else []))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- measurements ---------------------------------------------------------------------------

def bench_config(new_tokens: int):
    """The greedy run every benchmark uses: the default short prompt, never stopping early at EOS."""
    from kvviz.config import RunConfig
    return RunConfig(max_new_tokens=new_tokens, stop_on_eos=False)


def sync(device) -> None:
    if device.type == "cuda":
        import torch
        torch.cuda.synchronize(device)


class BareDecodeLoop:
    """The engine's own `prefill` and `decode_step`, greedy, and nothing else the engine does
    per step (cache probe, block accounting, text, events); `step_ms` times one decode step."""

    def __init__(self, lm, cfg):
        from kvviz import engine, layout
        from kvviz.hooks import find_decoder_layers
        self.lm, self.engine = lm, engine
        self.batch = engine.encode_prompts(lm.tokenizer, cfg, lm.device)
        self.cache = engine.make_cache(lm.model, "dynamic", self.batch.prompt_len + cfg.max_new_tokens)
        self.layers = find_decoder_layers(lm.model, len(layout.layer_specs(lm.model.config)))
        self.next_ids = engine.prefill(lm.model, self.batch, self.cache).argmax(-1)  # (B,)

    def step_ms(self, hooked: bool) -> float:
        """One decode step, with the engine's layer-timing hooks installed or not.

        Hooks go on before the clock starts and come off after it stops; reading the layer
        times (`take_ms`, which the engine does every step) is inside the clock.
        """
        import torch
        from kvviz.hooks import timed_layers
        column = self.next_ids[:, None]  # (B, 1)
        self.batch.ids = torch.cat([self.batch.ids, column], dim=1)
        self.batch.mask = torch.cat([self.batch.mask, torch.ones_like(column)], dim=1)
        hooks = timed_layers(self.layers, self.lm.device.type == "cuda") if hooked else nullcontext()
        with hooks as timer:
            start = time.perf_counter()
            self.next_ids = self.engine.decode_step(self.lm.model, self.batch, self.cache).argmax(-1)
            sync(self.lm.device)
            if timer is not None:
                timer.take_ms()
            return (time.perf_counter() - start) * 1e3


@dataclass(frozen=True)
class RunTiming:
    """One generation seen from outside: its decode pace and its whole duration."""

    step_ms: float  # median wall time between consecutive decode tokens
    total_s: float  # the whole call: tokenization, prefill and every decode step
    tokens: int  # new tokens per sequence

    @property
    def decode_tokens_per_s(self) -> float:
        return 1e3 / self.step_ms

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.total_s


def run_timing(stamps: list[float], start: float, end: float) -> RunTiming:
    """From the moments each new token became available (the first one ends the prefill)."""
    gaps = [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]
    return RunTiming(statistics.median(gaps), end - start, len(stamps))


def engine_timing(lm, cfg) -> RunTiming:
    """`kvviz.engine.generate`, stamped each time it yields an event."""
    from kvviz import engine
    start, stamps = time.perf_counter(), []
    for _ in engine.generate(lm, cfg):
        stamps.append(time.perf_counter())
    return run_timing(stamps, start, time.perf_counter())


class StampLogits:
    """A logits processor that only notes when each step's logits arrive."""

    def __init__(self):
        self.stamps: list[float] = []

    def __call__(self, input_ids, scores):
        self.stamps.append(time.perf_counter())
        return scores


def hf_generate_timing(lm, cfg) -> RunTiming:
    """`model.generate` (greedy, exactly max_new_tokens), same prompt, stamped each step."""
    from transformers import LogitsProcessorList
    from kvviz import engine
    start, stamp = time.perf_counter(), StampLogits()
    batch = engine.encode_prompts(lm.tokenizer, cfg, lm.device)
    lm.model.generate(input_ids=batch.ids, attention_mask=batch.mask, do_sample=False,
                      max_new_tokens=cfg.max_new_tokens, min_new_tokens=cfg.max_new_tokens,
                      pad_token_id=lm.tokenizer.pad_token_id, logits_processor=LogitsProcessorList([stamp]))
    sync(lm.device)
    return run_timing(stamp.stamps, start, time.perf_counter())


def generate_s(lm, cfg, mode: str) -> float:
    """Wall seconds of one whole engine run in `mode` ("cached" or "recompute")."""
    from kvviz import engine
    start = time.perf_counter()
    for _ in engine.generate(lm, cfg, mode):
        pass
    return time.perf_counter() - start


LOAD_SCRIPT = """
import json, time
start = time.perf_counter()
from kvviz import models
from kvviz.config import ModelSpec
imported = time.perf_counter()
models.convert_default_model()
converted = time.perf_counter()
models.load_model(ModelSpec())
loaded = time.perf_counter()
print(json.dumps({"import_s": imported - start, "convert_s": converted - imported,
                  "load_s": loaded - converted}))
"""


def load_in_subprocess(cache_dir: str | None) -> dict:
    """Seconds a fresh Python process spends importing, converting and loading the default model."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    if cache_dir is not None:
        env["KVVIZ_CACHE_DIR"] = cache_dir
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", LOAD_SCRIPT], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"loading the default model failed:\n{done.stderr[-2000:]}")
    timings = json.loads(done.stdout.strip().splitlines()[-1])
    return {**timings, "process_s": time.perf_counter() - start}


class GenerateSpy:
    """Stands in for `kvviz.engine.generate` (which the live page calls) to time its token loop.

    The clock starts when the page asks for the first event and stops when it asks for the one
    after the last, so the window holds every step plus everything the page did with each event.
    EOS is ignored so that every run yields exactly max_new_tokens events.
    """

    def __init__(self):
        self.lm = self.cfg = None
        self.tokens, self.wall_s = 0, 0.0

    def __enter__(self):
        from kvviz import engine
        self.real = engine.generate
        engine.generate = self.generate
        return self

    def __exit__(self, *exc):
        from kvviz import engine
        engine.generate = self.real
        return False

    def generate(self, lm, cfg, mode="cached", should_stop=None):
        self.lm, self.cfg = lm, dataclasses.replace(cfg, stop_on_eos=False)
        return self.timed(self.real(lm, self.cfg, mode, should_stop))

    def timed(self, events):
        start, count = time.perf_counter(), 0
        for event in events:
            count += 1
            yield event
        self.tokens, self.wall_s = count, time.perf_counter() - start


class PageClock:
    """Times the live page's work per event (`LiveView.update`) and its chart redraws
    (`LiveView.draw_figures`) while installed; the final redraw after a run is left out."""

    def __enter__(self):
        from kvviz import panels
        self.real_update, self.real_draw = panels.LiveView.update, panels.LiveView.draw_figures
        self.update_ms: list[float] = []
        self.draw_ms: list[float] = []
        self.final, clock = False, self

        def update(view, trace, final=False):
            clock.final, start = final, time.perf_counter()
            try:
                return clock.real_update(view, trace, final)
            finally:
                if not final:
                    clock.update_ms.append((time.perf_counter() - start) * 1e3)
                clock.final = False

        def draw_figures(view, *args, **kwargs):
            start = time.perf_counter()
            try:
                return clock.real_draw(view, *args, **kwargs)
            finally:
                if not clock.final:
                    clock.draw_ms.append((time.perf_counter() - start) * 1e3)

        panels.LiveView.update, panels.LiveView.draw_figures = update, draw_figures
        return self

    def __exit__(self, *exc):
        from kvviz import panels
        panels.LiveView.update, panels.LiveView.draw_figures = self.real_update, self.real_draw
        return False

    def reset(self) -> None:
        self.update_ms, self.draw_ms = [], []

    def notes(self, runs: int, page_wall_s: float) -> str:
        """Where the page's time went, per run, for the method paragraph."""
        text_ms = (sum(self.update_ms) - sum(self.draw_ms)) / max(len(self.update_ms), 1)
        return (f"Per page run: {len(self.update_ms) / runs:.0f} updates (text), "
                f"{text_ms:.1f} ms each beside the charts; {len(self.draw_ms) / runs:.0f} chart "
                f"redraws ({len(self.draw_ms) / page_wall_s:.1f} per second of generation), median "
                f"{statistics.median(self.draw_ms):.0f} ms each, the first (which builds the chart "
                f"specs) up to {max(self.draw_ms):.0f} ms; in all the page's own work took "
                f"{sum(self.update_ms) / 10 / page_wall_s:.0f} % of the page runs' wall time.")


def open_live_page(new_tokens: int, model: str | None = None):
    """The real app in Streamlit's AppTest: race off, real-time pace, the default model unless
    `model` names another (tests use a tiny one)."""
    from streamlit.testing.v1 import AppTest
    for name in ("KVVIZ_MODEL", "KVVIZ_PRESENT", "KVVIZ_HOSTED"):
        os.environ.pop(name, None)  # the default model, the normal layout, no hosted limits
    if model is not None:
        os.environ["KVVIZ_MODEL"] = model
    at = AppTest.from_file(str(APP), default_timeout=600)
    at.run()
    check_page(at)
    at.slider(key="max_new").set_value(new_tokens)
    at.toggle(key="race").set_value(False)
    return at


def check_page(at) -> None:
    if at.exception or at.error:
        raise RuntimeError(f"the live page failed: {[e.value for e in (*at.exception, *at.error)]}")


def wait_without_polling(runner, timeout: float = 3) -> None:
    """Stands in for AppTest's `require_widgets_deltas`, which polls the script runner every
    millisecond from the main thread; on 2 cores that polling alone slows the page's thread by
    10-20 %, a cost a served page (an idle event loop) does not have. This blocks instead."""
    runner._script_thread.join(timeout)
    if runner._script_thread.is_alive():
        runner.request_stop()
        runner.join()
        raise RuntimeError(f"the live page did not finish within {timeout:.0f} s")


def page_tokens_per_s(at, spy: GenerateSpy) -> float:
    """Click Generate on the live page; tokens/s over the spy's window."""
    from streamlit.testing.v1 import local_script_runner
    polling = local_script_runner.require_widgets_deltas
    local_script_runner.require_widgets_deltas = wait_without_polling
    try:
        at.button(key="generate").click().run()
    finally:
        local_script_runner.require_widgets_deltas = polling
    check_page(at)
    return spy.tokens / spy.wall_s


def headless_tokens_per_s(spy: GenerateSpy) -> float:
    """The same run (model, config, timing window) with the events only appended to a Trace,
    in a fresh thread as Streamlit runs each script run in a fresh thread."""
    from kvviz.trace import Trace

    def consume():
        trace = Trace({}, [])
        for event in spy.timed(spy.real(spy.lm, spy.cfg, "cached")):
            trace.append(event)

    in_fresh_thread(consume)
    return spy.tokens / spy.wall_s


def in_fresh_thread(work: Callable[[], object]) -> None:
    failure = []
    thread = threading.Thread(target=lambda: catch(work, failure), name="kvviz-bench-headless")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def catch(work: Callable[[], object], failure: list) -> None:
    try:
        work()
    except BaseException as exc:  # re-raised in the calling thread
        failure.append(exc)


LIVE_SCRIPT = """
import dataclasses, json, sys
import torch
from kvviz import bench
settings, threads = json.loads(sys.argv[1]), json.loads(sys.argv[2])
if threads:
    torch.set_num_threads(threads)
rows, method = bench.live_page_vs_headless(bench.Settings(**settings))
print(json.dumps({"rows": [dataclasses.asdict(r) for r in rows], "method": method}))
"""


def live_page_in_subprocess(s: Settings, threads: int | None) -> tuple[list[Result], str]:
    """`live_page_vs_headless` in a fresh process whose main thread never runs torch.

    With GNU OpenMP, once one thread has run a parallel torch op its worker pool stays alive,
    and any other thread's ops then find more OpenMP threads than cores and stop spinning
    between ops: on 2 cores a decode step in Streamlit's script thread went from ≈ 45 ms to
    ≈ 85 ms after this process's main thread had run the other benchmarks. A served page
    never runs torch on the server's main thread, so neither may this measurement.
    """
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    cmd = [sys.executable, "-c", LIVE_SCRIPT, json.dumps(dataclasses.asdict(s)), json.dumps(threads)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the live page benchmark failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return [Result(**row) for row in out["rows"]], out["method"]


# ---- the benchmarks: each returns its table rows and its method paragraph --------------------

def hook_overhead(lm, s: Settings) -> tuple[list[Result], str]:
    cfg = bench_config(2 * s.new_tokens + 2)
    samples: dict[str, list[float]] = {"hooked": [], "bare": []}
    for _ in range(s.reps):
        loop = BareDecodeLoop(lm, cfg)
        variants = {"hooked": lambda: loop.step_ms(True), "bare": lambda: loop.step_ms(False)}
        interleaved(variants, 1)  # warm-up pair, discarded
        for name, values in interleaved(variants, s.new_tokens).items():
            samples[name] += values
    m = medians(samples)
    row = Result("Hook overhead: decode step, hooked / un-hooked", f"{m['hooked']:.2f} ms",
                 f"{m['bare']:.2f} ms", m["hooked"] / m["bare"], "<=", 1.03)
    return [row], (
        "A bare greedy loop (`BareDecodeLoop` in `kvviz/bench.py`) runs the engine's own `prefill` "
        "and `decode_step` and nothing else. Its decode steps alternate one by one (A, B, A, B, …) "
        "between having `kvviz.hooks.timed_layers` installed on every decoder layer — reading the "
        "layer times after the step, as the engine does — and having no hooks; so both variants "
        "see the same sequence lengths and the same background load, step for step. "
        f"{s.reps} loops of {s.new_tokens} steps per variant (after one discarded pair each); the "
        "ratio is of the median step. "
        f"Hooked: {spread(samples['hooked'])} ms; un-hooked: {spread(samples['bare'])} ms.")


def engine_vs_generate(lm, s: Settings) -> tuple[list[Result], str]:
    cfg = bench_config(s.new_tokens)
    variants = {"engine": lambda: engine_timing(lm, cfg), "generate": lambda: hf_generate_timing(lm, cfg)}
    interleaved(variants, 1)  # warm-up round, discarded
    runs = interleaved(variants, s.reps)
    pace = {name: [t.decode_tokens_per_s for t in timings] for name, timings in runs.items()}
    whole = {name: [t.tokens_per_s for t in timings] for name, timings in runs.items()}
    m = medians(pace)
    row = Result("Engine / `model.generate` decode tokens/s", f"{m['engine']:.2f} tok/s",
                 f"{m['generate']:.2f} tok/s", m["engine"] / m["generate"], ">=", 0.95)
    w = medians(whole)
    return [row], (
        f"`kvviz.engine.generate` (every event built: cache probe, block accounting, layer hooks, "
        f"text) against `model.generate(do_sample=False, max_new_tokens={s.new_tokens}, "
        f"min_new_tokens={s.new_tokens})` on the same chat-templated prompt, EOS ignored so both "
        f"produce exactly {s.new_tokens} tokens; {s.reps} interleaved rounds after a warm-up round. "
        "Each run is stamped when each new token becomes available (when the engine yields its "
        "event; for `generate`, a logits processor that only reads the clock), and its decode "
        "tokens/s is 1000 / the median gap between stamps, which a burst of load from other "
        "processes cannot move much. Engine: "
        f"{spread(pace['engine'])} tok/s; generate: {spread(pace['generate'])} tok/s. Over whole "
        f"calls (tokenization and prefill included) the medians were {w['engine']:.2f} vs "
        f"{w['generate']:.2f} tok/s (ratio {w['engine'] / w['generate']:.3f}), noisier on a shared "
        "machine.")


def recompute_vs_cached(lm, s: Settings) -> tuple[list[Result], str]:
    rows, notes = [], []
    for n in s.recompute_lengths:
        cfg = bench_config(n)
        samples = interleaved({"recompute": lambda: generate_s(lm, cfg, "recompute"),
                               "cached": lambda: generate_s(lm, cfg, "cached")}, s.recompute_reps)
        m = medians(samples)
        rows.append(Result(f"Recompute / cached total time, {n} new tokens", f"{m['recompute']:.2f} s",
                           f"{m['cached']:.2f} s", m["recompute"] / m["cached"], ">", 1.0))
        notes.append(f"{n} tokens: recompute {spread(samples['recompute'])} s, cached "
                     f"{spread(samples['cached'])} s")
    first, last = rows[0], rows[-1]
    rows.append(Result(f"Growth of that ratio, {s.recompute_lengths[-1]} vs {s.recompute_lengths[0]} "
                       "new tokens", f"{last.ratio:.2f}×", f"{first.ratio:.2f}×",
                       last.ratio / first.ratio, ">", 1.0))
    return rows, (
        "The engine's two modes, same greedy run, same prompt: `recompute` feeds the whole sequence "
        "every step with `use_cache=False`; `cached` feeds one token and the cache. Total = wall "
        f"time of the whole run (prefill included), {s.recompute_reps} interleaved round(s) per "
        "length. A recompute step costs time roughly proportional to the sequence so far while a "
        "cached step stays nearly flat, so recompute's total grows like n² against cached's n and "
        "the ratio must grow with n — though more slowly than n while the fixed cost of a "
        "step (30 layers of small kernels, Python) outweighs the length-dependent part, as it "
        "does at these lengths on a CPU. The last row checks that growth between the shortest "
        "and the longest run (adjacent lengths are too close to order reliably on a busy "
        "machine). " + "; ".join(notes) + ".")


def live_page_vs_headless(s: Settings, model: str | None = None) -> tuple[list[Result], str]:
    with GenerateSpy() as spy, PageClock() as clock:
        at = open_live_page(s.new_tokens, model)
        page_tokens_per_s(at, spy)  # warm-up run; also tells the spy which model and config
        clock.reset()
        samples = interleaved({"page": lambda: page_tokens_per_s(at, spy),
                               "headless": lambda: headless_tokens_per_s(spy)}, s.reps)
    m = medians(samples)
    page_wall_s = sum(s.new_tokens / tps for tps in samples["page"])
    row = Result("Live page / headless engine tokens/s", f"{m['page']:.2f} tok/s",
                 f"{m['headless']:.2f} tok/s", m["page"] / m["headless"], ">=", 0.8)
    return [row], (
        "The real app (`app.py`, the Live page) runs in Streamlit's `AppTest`: "
        f"{s.new_tokens} max new tokens, race off, real-time pace, then **Generate** is clicked; "
        f"one warm-up click, then {s.reps} page runs interleaved with {s.reps} headless runs. "
        "`kvviz.engine.generate` is wrapped so that a clock starts when the page asks for the first "
        "event and stops when it asks for the one after the last: the window holds every step "
        "plus everything `panels.run_live` does per event — the streamed text rewritten every "
        f"token, and the metrics, captions and Altair charts redrawn at most every "
        f"{chart_interval_s()} s (≤ 7 Hz). The headless variant consumes the very same generator "
        "(same model object, same config, EOS ignored in both) and only appends to a Trace; it "
        "too runs in a fresh thread per run, as Streamlit runs every script run. The whole "
        "benchmark runs in a fresh process whose main thread never runs torch, like a Streamlit "
        "server: once any other thread of a process has run torch ops, GNU OpenMP finds more "
        "threads than cores and stops spinning between ops, and on this machine that alone made "
        "the page's decode steps 1.5–2× slower (the first version of this benchmark, run after "
        "the others in one process, read 0.34×). "
        "AppTest runs the page script in its own thread and builds every element's protobuf "
        "(Altair spec and Arrow data included) exactly as a served page does; it does not ship "
        "the messages over a websocket or render them, which a real server does on another "
        "thread (competing for the GIL and the 2 cores) and the browser elsewhere, so this is a "
        "lower bound on a served page's cost. AppTest's own wait loop, which polls the script "
        "every millisecond from the main thread and on 2 cores slowed the page by a further "
        "10-20 %, is replaced for these clicks by a blocking join (`wait_without_polling`). "
        "Page setup before the first event and the final "
        "redraw after the last are one-off costs outside the window. "
        f"Page: {spread(samples['page'])} tok/s; headless: {spread(samples['headless'])} tok/s. "
        + clock.notes(s.reps, page_wall_s))


SOAK_SCRIPT = """
import json, sys
from kvviz import bench
print(json.dumps(bench.soak_rss(int(sys.argv[1]))))
"""


def rss_bytes() -> int:
    """This process's resident memory now (Linux /proc)."""
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb * 1024


def soak_rss(runs: int) -> dict:
    """Click Generate `runs` times on one live page (race on); RSS after the first and the last."""
    import gc
    at = open_live_page(16)
    at.toggle(key="race").set_value(True)
    after = []
    for _ in range(runs):
        at.button(key="generate").click().run()
        check_page(at)
        gc.collect()
        after.append(rss_bytes())
    return {"first": after[0], "last": after[-1], "peak": max(after)}


def soak(s: Settings) -> tuple[list[Result], str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    done = subprocess.run([sys.executable, "-c", SOAK_SCRIPT, str(s.soak_runs)], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the soak benchmark failed:\n{done.stderr[-3000:]}")
    rss = json.loads(done.stdout.strip().splitlines()[-1])
    mib = lambda n: f"{n / 2**20:,.0f} MiB"  # noqa: E731
    row = Result(f"Soak: process memory after {s.soak_runs} generations / after the first",
                 mib(rss["last"]), mib(rss["first"]), rss["last"] / rss["first"], "<=", 1.05)
    return [row], (
        f"One fresh process drives the live page (AppTest, race on, 16 new tokens) through "
        f"{s.soak_runs} consecutive generations on one model and reads its resident memory "
        f"(VmRSS) after each, following a garbage collection: after the first "
        f"{mib(rss['first'])}, after the last {mib(rss['last'])}, peak {mib(rss['peak'])}. "
        "Each run replaces the session's trace, and its chart specs are reused, so memory should "
        "stay flat after the first run.")


def chart_interval_s() -> float:
    from kvviz.panels import CHART_INTERVAL_S
    return CHART_INTERVAL_S


def model_load(s: Settings) -> tuple[list[Result], str]:
    with tempfile.TemporaryDirectory(prefix="kvviz-bench-") as fresh:
        cold = load_in_subprocess(fresh) if s.cold_load else None
        warm = [load_in_subprocess(fresh if s.cold_load else None) for _ in range(s.load_reps)]
    warm_s = statistics.median(w["load_s"] for w in warm)
    rows = [Result("Default model warm load / 5 s budget", f"{warm_s:.2f} s", "5 s", warm_s / 5.0,
                   "<=", 1.0)]
    if cold is not None:
        first_s = cold["convert_s"] + cold["load_s"]
        rows.append(Result("Default model first run (conversion + load) / warm load",
                           f"{first_s:.1f} s", f"{warm_s:.2f} s", first_s / warm_s, None, None))
    cold_note = (f"First run (fresh temporary `KVVIZ_CACHE_DIR`): conversion {cold['convert_s']:.1f} s "
                 f"+ load {cold['load_s']:.2f} s, whole process {cold['process_s']:.1f} s. "
                 if cold else "The first conversion is skipped with `--quick`. ")
    return rows, (
        "Each load runs in a fresh Python subprocess (so nothing is warm in memory) that imports "
        "kvviz, calls `convert_default_model()` and then `load_model(ModelSpec())`, which includes "
        "the model check, tokenizer, weights and one warm-up forward pass. The first run converts "
        "the embedded GGUF into a fresh temporary cache folder; the warm runs reuse that folder "
        f"({s.load_reps} of them, median). The target is on `load_model` alone; the Python and torch "
        "imports are reported beside it. " + cold_note +
        "Warm: load " + spread([w["load_s"] for w in warm]) + " s; imports "
        + spread([w["import_s"] for w in warm]) + " s; whole process "
        + spread([w["process_s"] for w in warm]) + " s.")


# ---- the command ----------------------------------------------------------------------------

def machine_facts(lm) -> dict:
    from importlib.metadata import version

    import torch
    import transformers

    from kvviz import engine
    cfg = bench_config(1)
    prompt_tokens = engine.encode_prompts(lm.tokenizer, cfg, lm.device).prompt_len
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return {"CPU": f"{cpu_model()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}",
            "Software": f"Python {platform.python_version()}, torch {torch.__version__}, "
                        f"transformers {transformers.__version__}, streamlit {version('streamlit')}",
            "Model": f"{lm.label}, {lm.device.type}, {str(lm.dtype).removeprefix('torch.')}, greedy",
            "Prompt": f"{cfg.prompts[0]!r} in the chat template: {prompt_tokens} tokens",
            "Load average at start (1, 5, 15 min)": load}


def run_all(s: Settings, threads: int | None = None) -> tuple[dict, list[Result], list[tuple[str, str]]]:
    from kvviz.config import ModelSpec
    from kvviz.models import load_model
    lm = load_model(ModelSpec())
    machine, results, methods = machine_facts(lm), [], []
    benches = (("Hook overhead", lambda: hook_overhead(lm, s)),
               ("Engine vs model.generate", lambda: engine_vs_generate(lm, s)),
               ("Recompute vs cached", lambda: recompute_vs_cached(lm, s)),
               ("Live page vs headless engine", lambda: live_page_in_subprocess(s, threads)),
               ("Default model load", lambda: model_load(s)),
               ("Soak", lambda: soak(s)))
    for title, bench in benches:
        say(f"{title}…")
        start = time.perf_counter()
        rows, method = bench()
        say(f"{title}: {time.perf_counter() - start:.0f} s")
        results += rows
        methods.append((title, method))
    machine["Load average at end"] = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return machine, results, methods


def run(args) -> int:
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    s = QUICK if args.quick else FULL
    if args.reps:
        s = dataclasses.replace(s, reps=args.reps, recompute_reps=min(args.reps, s.recompute_reps))
    started, start_load = datetime.datetime.now().astimezone(), os.getloadavg()[0]
    machine, results, methods = run_all(s, args.threads)
    machine["Run time"] = f"{(datetime.datetime.now().astimezone() - started).total_seconds():.0f} s"
    print(render_table(results))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        notes = caveats(start_load, os.getloadavg()[0])
        doc = render_doc(machine, command_line(args), started.strftime("%Y-%m-%d %H:%M %Z"),
                         results, methods + [("Caveats", notes)])
        Path(args.out).write_text(doc)
        say(f"written to {args.out}")
    return 0  # a missed target is a finding, reported in the table, not a failed command


def caveats(start_load: float, end_load: float) -> str:
    """How far to trust the numbers, given how busy the machine was."""
    cores = os.cpu_count() or 1
    return (
        f"The 1-minute load average was {start_load:.1f} at the start and {end_load:.1f} at the end, "
        f"on {cores} cores: anything near or above {cores} means other processes were competing for "
        "the CPU during the measurements (on the kvviz development machine these are other "
        "sessions' test suites, Streamlit servers and headless browsers). Torch splits every "
        "forward pass across its threads and waits for the slowest, so one competing busy process "
        "can stretch a step several times over (decode steps of ≈ 50 ms were seen taking 600 ms "
        "on this 2-core machine while it was loaded). Interleaving puts both variants of a pair "
        "under the same conditions and medians drop the worst rounds, but a few-percent target "
        "such as the hook overhead is at the edge of what a busy machine can resolve; `--threads 1` "
        "trades absolute speed for steadier ratios. Rerun `make bench` on an idle machine before "
        "reading much into a difference of a percent or two.")


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="measure kvviz's overheads on the default model")
    p.add_argument("--quick", action="store_true", help="a smoke test: fewer, shorter runs (≈ 1 min)")
    p.add_argument("--reps", type=int, default=None,
                   help=f"interleaved repetitions per pair (default {FULL.reps}; {QUICK.reps} with --quick)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's own choice, as the dashboard runs)")
    p.add_argument("--out", default=None, help="also write the results as Markdown (docs/benchmarks.md)")
    p.set_defaults(func=run)
