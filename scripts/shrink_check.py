"""Every shrink mode on the default model, one run: bytes before/after, divergence, step-time ratio.

    .venv/bin/python scripts/shrink_check.py [--new-tokens 40]

Prints one row per mode; the full-cache bytes are checked against tokens x 46,080 B (SmolLM2 fp32).
"""
import argparse

from kvviz.shrink import presses, quant_cache
from kvviz.shrink import compute as shrink
from kvviz.core.config import LoadConfig
from kvviz.engine.models import load_model

CONTEXT = ("The old lighthouse on Gull Point was kept for forty years by Marta Olsen, who logged every "
           "ship that passed and every storm that broke on the rocks. ") * 12
QUESTION = "Who kept the lighthouse on Gull Point?"


def modes() -> list[shrink.ShrinkMode]:
    offered, _ = presses.offered()
    out = [shrink.ShrinkMode(press=name, ratio=0.5) for name in offered if name != presses.NONE]
    out += [shrink.ShrinkMode(backend="quanto", nbits=4), shrink.ShrinkMode(backend="hqq", nbits=8),
            shrink.ShrinkMode(backend="hqq", nbits=2), shrink.ShrinkMode(backend="fp8", nbits=8)]
    return [m for m in out if not m.backend or m.backend in quant_cache.available()[0]]


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--new-tokens", type=int, default=40)
    new_tokens = args.parse_args().new_tokens
    lm = load_model(LoadConfig())
    ids = shrink.prompt_ids(lm.tokenizer, CONTEXT + "\n" + QUESTION)
    print(f"prompt {ids.shape[1]} tokens, {new_tokens} new, greedy, {lm.dtype}")
    for mode in modes():
        c = shrink.compare(lm, ids, new_tokens, mode)
        full0, full1 = c.full.steps[0].kv_bytes, c.full.steps[-1].kv_bytes
        print(f"{mode.label():48s} full {full0:>11,} -> {full1:>11,} B | shrunk {c.shrunk.steps[0].kv_bytes:>11,}"
              f" -> {c.shrunk.steps[-1].kv_bytes:>11,} B ({c.bytes_ratio():.2f}x) | {c.caption()[:28]:28s}"
              f" | step time {c.step_time_ratio():.2f}x")
        print(f"{'':48s} full cache = {full0 // 46_080} prompt tokens x 46,080 B: {full0 % 46_080 == 0}")


if __name__ == "__main__":
    main()
