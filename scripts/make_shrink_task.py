"""Build assets/shrink_task.json: the Shrink quality sweep's built-in RULER-style task.

Generates `--per-task` items of each format kvviz.shrink.ruler offers (needle single, multi-key,
multi-value, variable tracking), the asked needle at depths spread evenly over the haystack,
each context + question `--tokens` tokens long in the default model's tokenizer. Nothing is run
and nothing is filtered: the items are what the seed gives, whatever a model answers.

    .venv/bin/python scripts/make_shrink_task.py [--per-task 13] [--tokens 2048] [--seed 0]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvviz.shrink import ruler, task  # noqa: E402

DEFAULT_TOKENIZER = Path.home() / ".cache" / "kvviz" / "SmolLM2-135M-Instruct"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-task", type=int, default=13)
    p.add_argument("--tokens", type=int, default=2048, help="context + question, in the tokenizer's tokens")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokenizer", default=None, help="a model folder (default: the default model's, converted once)")
    p.add_argument("--out", default=str(task.ASSET))
    args = p.parse_args(argv)
    tokenizer = load_tokenizer(args.tokenizer)
    count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    items = ruler.generate(args.per_task, args.tokens, count, seed=args.seed)
    note = (f"scripts/make_shrink_task.py --per-task {args.per_task} --tokens {args.tokens} --seed {args.seed}: "
            f"{len(items)} items ({', '.join(ruler.TASKS)}), depths spread evenly, none filtered; "
            f"context + question {min(map(count, (i.prompt for i in items)))}-{max(map(count, (i.prompt for i in items)))} tokens")
    Path(args.out).write_text(task.to_json(items, note) + "\n")
    print(note, "->", args.out)
    return 0


def load_tokenizer(folder: str | None):
    """The tokenizer of `folder`, or the default model's (converting it first if needed)."""
    from transformers import AutoTokenizer
    if folder is None and not DEFAULT_TOKENIZER.exists():
        from kvviz.core.config import LoadConfig
        from kvviz.engine.models import load_model
        return load_model(LoadConfig()).tokenizer
    return AutoTokenizer.from_pretrained(folder or str(DEFAULT_TOKENIZER))


if __name__ == "__main__":
    sys.exit(main())
