"""`python -m bench`: run the benchmarks, print the table, write docs/benchmarks.md, fail on a miss."""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import time
from pathlib import Path
from typing import Callable

from bench.machine import caveats, machine_facts, say
from bench.results import Result, render_doc, render_table
from bench.settings import FULL, QUICK, Settings


def engine_bench(name: str) -> Callable:
    """A headless engine benchmark on the default model, loaded once per invocation."""
    def measure(s: Settings, ctx: dict):
        from bench import engine_runs
        return getattr(engine_runs, name)(default_lm(ctx), s)
    return measure


def default_lm(ctx: dict):
    if "lm" not in ctx:
        from kvviz.core.config import LoadConfig
        from kvviz.engine.models import load_model
        ctx["lm"] = load_model(LoadConfig())
    return ctx["lm"]


def fast_lm(ctx: dict):
    """The fast tiny model (bench.fast_model: ~3 ms a decode step, the GPU's regime), loaded once."""
    if "fast_lm" not in ctx:
        from bench.fast_model import fast_model_dir
        from kvviz.core.config import LoadConfig
        from kvviz.engine.models import load_model
        ctx["fast_lm"] = load_model(LoadConfig(str(fast_model_dir())))
    return ctx["fast_lm"]


def hooks_fast(s: Settings, ctx: dict):
    from bench.engine_runs import hook_overhead
    from bench.fast_model import LABEL
    rows, method = hook_overhead(fast_lm(ctx), s, LABEL)
    return rows, FAST_NOTE + method


def cache_map_fast(s: Settings, ctx: dict):
    from bench.cache_map import attention_capture
    from bench.fast_model import LABEL
    row, method = attention_capture(fast_lm(ctx), s, LABEL)
    return [row], FAST_NOTE + method


FAST_NOTE = ("The default model's decode step takes 50-70 ms on this CPU and a few on a GPU; what a step "
             "costs on top weighs more on a fast engine. This benchmark runs on the fast tiny model of "
             "`bench/fast_model.py` (a random Llama, 4 layers, hidden 64, SmolLM2's tokenizer: a few "
             "milliseconds a step on one core). ")


def live_browser(s: Settings, ctx: dict):
    from bench.browser_page import browser_vs_headless
    return browser_vs_headless(s)


def live_browser_fast(s: Settings, ctx: dict):
    from bench.browser_page import browser_vs_headless, fast_bench
    return browser_vs_headless(s, fast_bench(s))


def live_apptest(s: Settings, ctx: dict):
    from bench.apptest_page import live_page_in_subprocess
    return live_page_in_subprocess(s, ctx.get("threads"))


def live_threads(s: Settings, ctx: dict):
    from bench.thread_policy import thread_policy
    return thread_policy(s)


def model_load(s: Settings, ctx: dict):
    from bench.load import model_load as measure
    return measure(s)


def cache_map_costs(s: Settings, ctx: dict):
    from bench.cache_map import attention_cost
    return attention_cost(default_lm(ctx), s)


def soak(s: Settings, ctx: dict):
    from bench.soak import soak as measure
    return measure(s)


def shrink_modes(s: Settings, ctx: dict):
    from bench.shrink_modes import shrink_modes as measure
    return measure(default_lm(ctx), s)


def vllm_replay(s: Settings, ctx: dict):
    from bench.vllm_replay import vllm_replay as measure
    return measure(s)


def suite_load(s: Settings, ctx: dict):
    from bench.suite_load import suite_load as measure
    return measure(s)


BENCHES: dict[str, tuple[str, Callable]] = {  # --only name -> (title, measure(settings, context))
    "hooks": ("Hook overhead", engine_bench("hook_overhead")),
    "generate": ("Engine vs model.generate", engine_bench("engine_vs_generate")),
    "recompute": ("Recompute vs cached", engine_bench("recompute_vs_cached")),
    "cache-map": ("Cache map: attention capture and redraw", cache_map_costs),
    "hooks-fast": ("Hook overhead on a fast engine", hooks_fast),
    "cache-map-fast": ("Attention capture on a fast engine", cache_map_fast),
    "live-browser": ("Live page in a real browser vs headless", live_browser),
    "live-browser-fast": ("Live page in a real browser vs headless, on a fast engine", live_browser_fast),
    "live-apptest": ("Live page in AppTest vs headless (harness)", live_apptest),
    "live-threads": ("Torch thread policy on the live page", live_threads),
    "load": ("Default model load", model_load),
    "soak": ("Soak", soak),
    "shrink": ("Shrink modes vs the full cache", shrink_modes),
    "vllm-replay": ("vLLM per-request accounting: replay and live", vllm_replay),
    "suite-load": ("Tests that start processes, quiet and under load", suite_load),
}


OPTIONAL = ("live-threads",)  # run only when named: minutes for a decision made once per machine


def selected(only: str | None) -> list[str]:
    """The benchmarks `--only a,b` names, in table order; without it all but the OPTIONAL ones."""
    if not only:
        return [name for name in BENCHES if name not in OPTIONAL]
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        raise SystemExit(f"make bench: unknown benchmark {', '.join(unknown)}; "
                         f"choose from {', '.join(BENCHES)}")
    return [n for n in BENCHES if n in names]


def run_all(s: Settings, names: list[str], threads: int | None = None):
    """(machine facts, table rows, method paragraphs) of the named benchmarks, run in turn."""
    ctx: dict = {"threads": threads}
    results: list[Result] = []
    methods: list[tuple[str, str]] = []
    load_start = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    for name in names:
        title, measure = BENCHES[name]
        say(f"{title}…")
        start = time.perf_counter()
        rows, method = measure(s, ctx)
        say(f"{title}: {time.perf_counter() - start:.0f} s")
        results += rows
        methods.append((title, method))
    machine = machine_facts(ctx.get("lm"), load_start)
    return machine, results, methods


def exit_status(results: list[Result]) -> int:
    """1 when any target was missed, else 0 (rows without a target never fail)."""
    return 1 if any(r.passed is False for r in results) else 0


def command_line(args) -> str:
    parts = ["python -m bench"] + (["--quick"] if args.quick else [])
    parts += [f"--only {args.only}"] if getattr(args, "only", None) else []
    parts += [f"--reps {args.reps}"] if args.reps else []
    parts += [f"--threads {args.threads}"] if getattr(args, "threads", None) else []
    return " ".join(parts + ([f"--out {args.out}"] if args.out else []))


def settings_of(args) -> Settings:
    s = QUICK if args.quick else FULL
    if args.reps:
        s = dataclasses.replace(s, reps=args.reps, recompute_reps=min(args.reps, s.recompute_reps),
                                browser_reps=args.reps, fast_browser_reps=args.reps)
    return s


def run(args) -> int:
    import transformers
    transformers.logging.set_verbosity_error()
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    names = selected(getattr(args, "only", None))
    started, start_load = datetime.datetime.now().astimezone(), os.getloadavg()[0]
    machine, results, methods = run_all(settings_of(args), names, args.threads)
    machine["Run time"] = f"{(datetime.datetime.now().astimezone() - started).total_seconds():.0f} s"
    print(render_table(results))
    if args.out:
        write_doc(args, machine, results, methods + [("Caveats", caveats(start_load, os.getloadavg()[0]))],
                  started)
    failed = [r.name for r in results if r.passed is False]
    say(f"{len(failed)} target(s) missed: {'; '.join(failed)}" if failed else "every target met")
    return exit_status(results)


def write_doc(args, machine: dict, results: list[Result], methods: list[tuple[str, str]],
              started: datetime.datetime) -> None:
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    doc = render_doc(machine, command_line(args), started.strftime("%Y-%m-%d %H:%M %Z"), results, methods)
    Path(args.out).write_text(doc)
    say(f"written to {args.out}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description="measure kvviz's overheads and the "
                                "live page's speed; exits 1 when a target is missed")
    p.add_argument("--quick", action="store_true", help="a smoke test: fewer, shorter runs")
    p.add_argument("--only", default=None,
                   help=f"comma-separated benchmarks to run (of {', '.join(BENCHES)}); default all")
    p.add_argument("--reps", type=int, default=None,
                   help=f"interleaved repetitions per pair (default {FULL.reps}; {QUICK.reps} with --quick)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads of the headless engine benchmarks (default: torch's own choice)")
    p.add_argument("--out", default=None, help="also write the results as Markdown (docs/benchmarks.md)")
    p.set_defaults(func=run)
    return p
