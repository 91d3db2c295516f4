"""Check kvviz's CUDA paths on a GPU machine; prints one line per check and exits non-zero on failure.

Run: `make gpu-check` (or `python scripts/gpu_check.py [--out DIR] [--no-page]`). Records traces of
the default model in bf16 and fp32 on CUDA into DIR (default: runs/) for the Replay page (greedy,
64 tokens past the end of the turn: checks, not examples to ship in assets/traces); puts each
decode step beside the device's memory-bandwidth floor (the weights and the cache read once per
step, at the bandwidth a large copy reaches); measures the hooks' and the attention capture's cost
per decode step in bf16 (`make bench`'s hooks and cache-map rows); and runs the live page in
Chromium against headless `kvviz record` on CUDA (bench.browser_page: a GPU is the fast engine the
page must not hold back), its rows into DIR/page-vs-headless.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/, beside kvviz

from kvviz.engine import loop as engine
from kvviz.engine import models
from kvviz.sweep import compute as sweep
from kvviz.core.config import LoadConfig, RunConfig
from kvviz.core.trace import Trace, format_summary, summary

FAILURES: list[str] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'PASS' if ok else 'FAIL'}  {name}{'  ' + detail if detail else ''}")
    if not ok:
        FAILURES.append(name)


def record(lm, cfg: RunConfig, out: Path, tag: str) -> Trace:
    trace = Trace(engine.run_meta(lm, cfg), [])
    for mode in ("cached", "recompute"):
        for event in engine.generate(lm, cfg, mode):
            trace.append(event)
    trace.save(out / f"{tag}.json")
    print(format_summary(summary(trace)))
    return trace


def check_trace(trace: Trace, tag: str, expect_parity: bool) -> None:
    cached, recompute = trace.events_of("cached"), trace.events_of("recompute")
    check(f"{tag}: CUDA-event step timings positive", all(e.step_ms > 0 for e in cached + recompute))
    check(f"{tag}: per-layer CUDA-event timings positive",
          all(s.forward_ms > 0 for e in cached for s in e.layers))
    check(f"{tag}: allocator bytes reported",
          all(e.cuda_allocated_bytes and e.cuda_reserved_bytes for e in cached),
          f"last allocated {cached[-1].cuda_allocated_bytes:,} B, reserved {cached[-1].cuda_reserved_bytes:,} B")
    check(f"{tag}: cache bytes equal the formula", all(e.kv_bytes == e.formula_bytes for e in cached),
          f"{cached[-1].kv_bytes:,} B")
    same = [c.token_ids == r.token_ids for c, r in zip(cached, recompute)]
    first = same.index(False) if False in same else None
    detail = "identical" if first is None else f"first divergence at step {first}"
    if expect_parity:
        check(f"{tag}: greedy cached == recompute", first is None, detail)
    else:
        print(f"INFO  {tag}: greedy cached vs recompute: {detail} (half precision may flip near-ties)")


def static_reservation_problems(meta, kv_bytes: list[int], allocated_delta_bytes: int | None,
                                slack_bytes: int = 2**20) -> list[str]:
    """Why the static cache's measured bytes are not the full reservation (empty when they are).

    Three independent sources must agree: the config (`RunMeta.reserved_bytes`), the cache tensors
    after every step (`kv_bytes`, numel × element size) and, on CUDA, how much the allocator
    grew when the cache was created and filled by the prefill (the tensors plus at most
    `slack_bytes` of small buffers). A cache that grew per token, or a probe that counted
    tokens instead of slots, fails.
    """
    want, problems = meta.reserved_bytes, []
    wrong = [b for b in kv_bytes if b != want]
    if not kv_bytes or wrong:
        problems.append(f"cache tensors hold {wrong[:3] or 'nothing'} B, not the {want:,} B reserved")
    if allocated_delta_bytes is not None and not want <= allocated_delta_bytes <= want + slack_bytes:
        problems.append(f"the allocator grew by {allocated_delta_bytes:,} B for a {want:,} B reservation")
    return problems


def allocator_delta_bytes(lm, cfg: RunConfig) -> int:
    """torch.cuda.memory_allocated growth from creating a StaticCache to after its prefill."""
    batch = engine.encode_prompts(lm.tokenizer, cfg, lm.device)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with torch.inference_mode():
        cache = engine.make_cache(lm.model, "static", engine.run_meta(lm, cfg)["max_len"])
        logits = engine.prefill(lm.model, batch, cache)
        del logits  # the step's output is not the cache
    torch.cuda.synchronize()
    delta = torch.cuda.memory_allocated() - before
    del cache
    return delta


def check_static_reservation(lm, cfg: RunConfig, tag: str) -> None:
    meta = engine.run_meta(lm, cfg)
    kv_bytes = [e.kv_bytes for e in engine.generate(lm, cfg)]
    problems = static_reservation_problems(meta, kv_bytes, allocator_delta_bytes(lm, cfg))
    check(f"{tag}: static cache holds the whole reservation", not problems,
          "; ".join(problems) or f"{meta.reserved_bytes:,} B")


def check_sweep(lm) -> None:
    """A small sweep on CUDA: peak allocator bytes per point, and bytes == formula."""
    settings = sweep.SweepSettings(prompt_tokens=(256, 2048), batches=(1, 8), new_tokens=8)
    rows = list(sweep.run_sweep(lm, settings))
    for r in rows:
        print(f"INFO  sweep {r.prompt_tokens} tokens x {r.batch}: {r.status}, ttft {r.ttft_ms} ms, "
              f"peak {r.peak_cuda_bytes} B, cache {r.end_kv_bytes} B")
    ok = [r for r in rows if r.status == "ok"]
    check("sweep: every point ran", len(ok) == len(rows))
    check("sweep: peak allocator bytes reported", all(r.peak_cuda_bytes for r in ok))
    check("sweep: cache bytes equal the formula", all(r.end_kv_bytes == r.end_formula_bytes for r in ok))


def peak_bytes_per_s(props) -> float | None:
    """The memory's datasheet bandwidth from the device properties (DDR: two transfers a clock):
    an H100 SXM's 2,619 MHz × 5,120 bits gives 3.35 TB/s. None where torch does not report them."""
    clock_khz, bus_bits = getattr(props, "memory_clock_rate", None), getattr(props, "memory_bus_width", None)
    if not clock_khz or not bus_bits:
        return None
    return 2 * clock_khz * 1e3 * bus_bits / 8


def copy_bytes_per_s(device, size_bytes: int = 2**30, reps: int = 10) -> float:
    """The bandwidth a device-to-device copy of `size_bytes` reaches (each byte read and written once)."""
    src = torch.empty(size_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        dst.copy_(src)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    del src, dst
    return 2 * size_bytes * reps / seconds


def decode_floor_ms(weight_bytes: int, kv_bytes: int, bytes_per_s: float) -> float:
    """The shortest a decode step can take when memory bound: every weight and every cached K and V
    read once (batch 1: the step's arithmetic is far below what the device does in that time)."""
    return (weight_bytes + kv_bytes) / bytes_per_s * 1e3


def floor_problems(step_ms: float, floor_ms: float) -> list[str]:
    """A step timed below the floor is a clock that is wrong (events recorded before the work ran)."""
    if step_ms < floor_ms:
        return [f"decode step {step_ms:.3f} ms is below the memory floor of {floor_ms:.3f} ms: the step "
                "timings cannot be right"]
    return []


def check_decode_floor(lm, trace: Trace, tag: str) -> None:
    """The recorded run's median decode step (CUDA events) against the memory-bandwidth floor."""
    decode = [e for e in trace.events_of("cached") if e.phase == "decode"]
    if not decode:
        check(f"{tag}: decode step at or above the memory-bandwidth floor", False,
              "the run has no decode step (use --max-new-tokens 2 or more)")
        return
    step_ms = statistics.median(e.step_ms for e in decode)
    kv_bytes = decode[len(decode) // 2].kv_bytes  # the cache the median step read, about
    measured = copy_bytes_per_s(lm.device)
    peak = peak_bytes_per_s(torch.cuda.get_device_properties(lm.device))
    floor_ms = decode_floor_ms(lm.weight_bytes, kv_bytes, measured)
    problems = floor_problems(step_ms, floor_ms)
    check(f"{tag}: decode step at or above the memory-bandwidth floor", not problems,
          "; ".join(problems) or f"{step_ms:.3f} ms vs {floor_ms:.4f} ms")
    datasheet = f", datasheet {peak / 1e12:.2f} TB/s" if peak else ""
    print(f"INFO  {tag}: decode step {step_ms:.3f} ms = {step_ms / floor_ms:,.0f} × the floor: weights "
          f"{lm.weight_bytes:,} B + cache {kv_bytes:,} B at {measured / 1e12:.2f} TB/s (a 1 GiB copy"
          f"{datasheet}); batch 1 of a small model is bound by kernel launches and Python, not memory")


def report_rows(rows, tag: str) -> None:
    """Each benchmark row as a line: a target checked (PASS / FAIL), or INFO."""
    for row in rows:
        detail = f"{row.measured} vs {row.baseline}: {row.ratio:.3f} (target {row.target})"
        if row.op is None:
            print(f"INFO  {tag}: {row.name}: {row.measured} vs {row.baseline}: {row.ratio:.3f}")
        else:
            check(f"{tag}: {row.name}", bool(row.passed), detail)


def check_step_costs(lm, label: str, reps: int = 3, tokens: int = 64) -> None:
    """What the engine adds to a decode step on this device, as `make bench` measures it on CPU:
    the layer-timing hooks (hooked / un-hooked) and the attention capture (eager + capture / sdpa),
    each row named with `label` and held to the bench's target."""
    from bench.cache_map import attention_capture
    from bench.engine_runs import hook_overhead
    from bench.settings import Settings
    settings = Settings(reps=reps, new_tokens=tokens)
    report_rows(hook_overhead(lm, settings, label)[0] + [attention_capture(lm, settings, label)[0]],
                f"step costs on {lm.device.type}")


def cuda_page_bench(reps: int, tokens: int):
    """The default model on CUDA: the fast engine of the issue (a few ms a step), so the page is held
    to the fast model's compute target, not to the CPU default model's like for like."""
    from bench import browser_page
    return browser_page.PageBench("default model on CUDA", None, tokens, reps, browser_page.FAST_COMPUTE_TARGET,
                                browser_page.LONG_ANSWER)


def check_page_vs_headless(out: Path, reps: int, tokens: int) -> None:
    """The live page in Chromium against headless `kvviz record` on this GPU (both on CUDA, the
    default model in bf16, the same torch threads): the rows of `make bench`'s live-browser-fast."""
    from bench import app_server, browser_page
    from bench.results import render_table
    from bench.settings import Settings
    if not app_server.CHROMIUM.exists():
        print(f"INFO  page vs headless on CUDA: not run, it needs Chromium at {app_server.CHROMIUM} "
              "(Debian's chromium package) and playwright")
        return
    settings = Settings(browser_reps=reps, new_tokens=tokens)
    try:
        rows, method = browser_page.browser_vs_headless(settings, cuda_page_bench(reps, tokens))
    except Exception as exc:  # a server, a worker or a browser that failed: one line, then the summary
        check("page vs headless on CUDA: ran", False, f"{type(exc).__name__}: {str(exc)[-2000:]}")
        return
    report_rows(rows, "page vs headless on CUDA")
    (out / "page-vs-headless.md").write_text(render_table(rows) + "\n\n" + method + "\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="runs")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--no-page", action="store_true", help="skip the live page vs headless comparison")
    parser.add_argument("--page-reps", type=int, default=3, help="rounds of the page comparison")
    parser.add_argument("--page-tokens", type=int, default=256, help="new tokens per run of the page comparison")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("FAIL  CUDA is not available on this machine")
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    cfg = RunConfig(prompts=("Explain what a KV cache is and why it matters.",),
                    max_new_tokens=args.max_new_tokens, stop_on_eos=False)
    for dtype, parity in (("float32", True), ("bfloat16", False)):
        lm = models.load_model(LoadConfig(device="cuda", dtype=dtype))
        trace = record(lm, cfg, out, f"smollm2-135m-cuda-{dtype}")
        check_trace(trace, dtype, parity)
        check_decode_floor(lm, trace, dtype)
        check_static_reservation(lm, replace(cfg, cache_backend="static"), dtype)
    check_step_costs(lm, "default model, bfloat16 on CUDA")  # the loop's last: the dtype kvviz picks there
    check_sweep(models.load_model(LoadConfig(device="cuda", dtype="bfloat16")))
    del lm
    engine.free_device_memory(torch.device("cuda"))
    if not args.no_page:  # last: it starts a server and a headless worker, each with its own model
        check_page_vs_headless(out, args.page_reps, args.page_tokens)
    print(f"{len(FAILURES)} failed" if FAILURES else "all CUDA checks passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
