"""Measure Shrink's default-demo candidates on the real default model: every offered press at the
leaderboard's ratios (and 0.9) on a few questions about the Shrink page's context, answers stopped
at the end of the turn, each against the full cache's answer.

    .venv/bin/python scripts/shrink_demo_candidates.py [--new-tokens 24] [--out table.json]

Prints one Markdown table per question (press, ratio, same as full?, the answer) and, with --out,
writes every row as JSON. Greedy fp32 on CPU: the tokens are deterministic, the times are not shown.
The choice of the page's default (kvviz.shrink.compute.DEFAULT_MODE / DEFAULT_PROMPT) was made
from this table; the reasoning is in the comment above DEFAULT_MODE.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvviz.core.config import LoadConfig  # noqa: E402
from kvviz.engine.models import load_model, stop_token_ids  # noqa: E402
from kvviz.shrink import compute as shrink  # noqa: E402
from kvviz.shrink import presses  # noqa: E402

RATIOS = (0.25, 0.5, 0.75, 0.9)
QUESTIONS = {  # question -> (the answer's key words, where the fact sits in the context)
    "in which year did the lighthouse get an electric lamp?": ("1952", "late"),
    "how many steps did Ada climb every night?": ("114", "early"),
    "who rowed out to the lighthouse every Sunday?": ("Tom", "middle"),
    "what colour were Ada's logbooks?": ("green", "early and at the end"),
}


def context() -> str:
    """The Shrink page's context: its default prompt without the question."""
    return shrink.DEFAULT_PROMPT.split("\n\nQuestion:")[0]


def measure(lm, question: str, new_tokens: int, stops: set[int]) -> list[dict]:
    ids = shrink.prompt_ids(lm.tokenizer, f"{context()}\n\nQuestion: {question}")
    full = shrink.run(lm, ids, new_tokens, shrink.ShrinkMode(), stops)
    rows = [{"question": question, "prompt_tokens": ids.shape[1], "press": "full cache", "ratio": 0.0,
             "same": True, "answer": full.text, "ended": full.tokens[-1] in stops}]
    for name in presses.offered()[0]:
        for ratio in RATIOS:
            out = shrink.run(lm, ids, new_tokens, shrink.ShrinkMode(press=name, ratio=ratio), stops)
            rows.append({"question": question, "prompt_tokens": ids.shape[1], "press": name, "ratio": ratio,
                         "same": out.tokens == full.tokens, "answer": out.text, "ended": out.tokens[-1] in stops})
            print(f"{name} {ratio}: {out.text!r}", file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    head = f"**{rows[0]['question']}** ({rows[0]['prompt_tokens']} prompt tokens)\n\n"
    lines = ["| press | ratio | answer vs full | answer |", "|---|---|---|---|"]
    for r in rows:
        same = "reference" if r["press"] == "full cache" else ("identical" if r["same"] else "**differs**")
        text = r["answer"].replace("\n", "⏎").replace("|", "\\|")
        lines.append(f"| {r['press']} | {r['ratio']:.2f} | {same} | {text}{'' if r['ended'] else ' …(cut)'} |")
    return head + "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    lm = load_model(LoadConfig())
    stops = set(stop_token_ids(lm.model, lm.tokenizer))
    rows = []
    for question in QUESTIONS:
        found = measure(lm, question, args.new_tokens, stops)
        print(table(found) + "\n", flush=True)
        rows += found
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
