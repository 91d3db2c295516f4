"""Check kvviz's CUDA paths on a GPU machine; prints one line per check and exits non-zero on failure.

Run: `make gpu-check` (or `python scripts/gpu_check.py [--out DIR]`). Records traces of the
default model in bf16 and fp32 on CUDA into DIR (default: runs/) for the Replay page.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

from kvviz.engine import loop as engine
from kvviz.engine import models
from kvviz.sweep import compute as sweep
from kvviz.core.config import ModelSpec, RunConfig
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="runs")
    parser.add_argument("--max-new-tokens", type=int, default=64)
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
        lm = models.load_model(ModelSpec(device="cuda", dtype=dtype))
        check_trace(record(lm, cfg, out, f"smollm2-cuda-{dtype}"), dtype, parity)
        check_static_reservation(lm, replace(cfg, cache_backend="static"), dtype)
    check_sweep(models.load_model(ModelSpec(device="cuda", dtype="bfloat16")))
    print(f"{len(FAILURES)} failed" if FAILURES else "all CUDA checks passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
