"""Build kvviz/assets/shrink_task.json: the Shrink quality sweep's built-in retrieval task.

Generates items (kvviz.shrink.task.candidates: facts planted among filler, one question each), runs
each on the default model with the full cache (greedy, 5 new tokens, through the chat template with
the answer's start given), and keeps the first ITEMS it answers right: the task is answerable at
ratio 0 by construction. Prints every candidate's answer and the share kept.

    .venv/bin/python scripts/make_shrink_task.py [--items 6] [--seed 32]
"""
from __future__ import annotations

import argparse
import sys

from kvviz.core.config import ModelSpec
from kvviz.engine.models import load_model
from kvviz.shrink import compute as shrink
from kvviz.shrink import sweep, task


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=int, default=6)
    p.add_argument("--seed", type=int, default=32)
    p.add_argument("--out", default=str(task.ASSET))
    args = p.parse_args(argv)
    lm = load_model(ModelSpec())
    kept, tried = [], 0
    for item in task.candidates(args.seed, 4 * args.items):
        tried += 1
        run = shrink.run(lm, sweep.item_ids(lm.tokenizer, item), sweep.NEW_TOKENS, shrink.ShrinkMode())
        right = item.is_right(run.text)
        print(f"{tried:3d} wants {item.answer}: {run.text!r} {'right' if right else 'wrong'}", flush=True)
        if right:
            kept.append(item)
        if len(kept) == args.items:
            break
    if len(kept) < args.items:
        print(f"only {len(kept)} of {tried} answered right", file=sys.stderr)
        return 1
    with open(args.out, "w") as f:
        f.write(task.to_json(kept, f"{lm.label}, full cache, greedy: {len(kept)} right of {tried} tried") + "\n")
    print(f"{len(kept)} items answered right of {tried} tried -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
