"""kvviz's sweep beside the kvpress leaderboard's published figures, for the same presses and ratios.

The published figures are the kvpress leaderboard's (huggingface.co/spaces/nvidia/kvpress-leaderboard,
benchmark/ruler__4096__meta-llama--Meta-Llama-3.1-8B-Instruct__<press>__<ratio>/metrics.json: RULER
4k, Llama-3.1-8B-Instruct, the leaderboard's protocol), as collected in the board snapshot
kvpress_leaderboard_raw.csv of github.com/lapidoty/kvpress-centrality
(project/reproduction/analysis/, commit 44b0a80). Per press and ratio: the mean `string_match`
over RULER's 13 tasks ("macro"), and the mean over the four task formats kvviz generates
(niah_single_1 — RULER's noise haystack, as kvviz's —, niah_multikey_1, niah_multivalue, vt).

    .venv/bin/python scripts/shrink_published.py [--sweep assets/shrink_sweep_smollm2.json]

prints a Markdown table (docs/shrink.md holds its output) and, per ratio, whether the two rank
the presses alike (Spearman's rho over the presses both measured).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvviz.core import assets  # noqa: E402
from kvviz.shrink import sweep  # noqa: E402

# press (kvviz's name) -> ratio -> (macro over 13 tasks, niah_single_1, niah_multikey_1, niah_multivalue, vt),
# Llama-3.1-8B-Instruct, RULER 4k, in % (string_match). ExpectedAttention on the board is AdaKV-wrapped.
LLAMA = {
    "full cache": {0.0: (95.69, 100.0, 99.8, 99.9, 99.88)},
    "StreamingLLM": {0.25: (79.77, 75.2, 77.4, 75.3, 94.64), 0.5: (59.23, 50.2, 55.6, 53.4, 72.32),
                     0.75: (37.69, 25.2, 32.0, 27.85, 43.12), 0.875: (26.73, 13.2, 19.6, 16.7, 23.52)},
    "SnapKV": {0.25: (81.83, 99.0, 99.0, 90.15, 94.12), 0.5: (69.66, 96.6, 85.6, 72.45, 82.0),
               0.75: (43.36, 77.2, 34.4, 25.3, 59.76), 0.875: (27.21, 62.0, 20.8, 16.25, 36.68)},
    "SnapKV (question in the window)": {0.25: (94.52, 100.0, 99.8, 99.6, 99.32), 0.5: (88.9, 100.0, 99.8, 99.2, 97.76),
                                        0.75: (78.76, 100.0, 100.0, 97.55, 88.4),
                                        0.875: (67.96, 100.0, 99.2, 72.0, 66.24)},
    "Knorm": {0.25: (76.3, 100.0, 91.2, 93.5, 99.92), 0.5: (52.78, 100.0, 39.8, 54.45, 99.76),
              0.75: (30.3, 100.0, 4.4, 6.95, 92.96), 0.875: (21.22, 98.8, 0.2, 1.9, 51.08)},
    "TOVA": {0.25: (87.35, 100.0, 99.8, 99.8, 99.88), 0.5: (76.21, 100.0, 99.8, 99.7, 99.88),
             0.75: (63.32, 100.0, 98.2, 96.9, 96.6), 0.875: (46.37, 97.8, 78.2, 70.6, 42.92)},
    "KVzip": {0.25: (95.47, 100.0, 100.0, 99.9, 99.92), 0.5: (95.43, 99.8, 100.0, 99.95, 99.92),
              0.75: (95.24, 100.0, 100.0, 99.9, 99.84), 0.875: (92.8, 100.0, 99.2, 98.2, 99.44)},
    "AdaKV-ExpectedAttention": {0.25: (95.25, 100.0, 99.6, 99.65, 99.84), 0.5: (92.18, 99.8, 99.2, 97.75, 99.48),
                                0.75: (75.94, 99.8, 96.4, 84.2, 96.92), 0.875: (45.13, 97.2, 50.2, 39.15, 81.28)},
    "KeyDiff": {0.25: (91.59, 100.0, 100.0, 99.9, 99.88), 0.5: (85.46, 100.0, 100.0, 99.75, 99.88),
                0.75: (72.9, 100.0, 100.0, 98.95, 99.6), 0.875: (63.34, 100.0, 98.6, 97.5, 85.0)},
    "LagKV": {0.25: (92.57, 100.0, 99.8, 99.6, 99.84), 0.5: (84.99, 100.0, 98.2, 97.3, 98.96),
              0.75: (67.86, 100.0, 88.0, 79.15, 94.68), 0.875: (45.64, 99.2, 51.2, 40.15, 92.32)},
    "CUR": {0.25: (93.85, 99.4, 99.8, 99.65, 99.04), 0.5: (79.41, 96.0, 99.0, 96.7, 76.8),
            0.75: (45.57, 50.6, 83.4, 72.6, 8.0), 0.875: (19.76, 26.2, 40.2, 32.55, 0.8)},
}
SOURCE = ("kvpress leaderboard (huggingface.co/spaces/nvidia/kvpress-leaderboard), RULER 4k, Llama-3.1-8B-Instruct, "
          "via the board snapshot kvpress_leaderboard_raw.csv in github.com/lapidoty/kvpress-centrality @44b0a80")


def name_of(row) -> str:
    if row.kind == "full":
        return "full cache"
    return f"{row.press} (question in the window)" if row.question_aware else row.press


def four_formats(figures: tuple) -> float:
    return sum(figures[1:]) / 4


def ranks(values: list[float]) -> list[float]:
    """Average ranks (ties share the mean of their places)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return cov / var if var else 0.0


def table(result: sweep.Sweep) -> str:
    lines = ["| press | ratio | kvviz, SmolLM2-135M, 1k (95 % interval) | leaderboard, Llama-3.1-8B, 4k: 4 formats | "
             "leaderboard: 13 tasks |", "|---|---|---|---|---|"]
    for r in result.rows:
        published = LLAMA.get(name_of(r), {}).get(r.ratio if r.kind == "press" else 0.0)
        if published is None:
            continue
        lo, hi = r.interval
        lines.append(f"| {name_of(r)} | {r.ratio:g} | {r.accuracy:.0%} ({lo:.0%}–{hi:.0%}), {r.right}/{r.items} | "
                     f"{four_formats(published):.1f} % | {published[0]:.1f} % |")
    return "\n".join(lines)


def agreement(result: sweep.Sweep) -> list[str]:
    out = []
    for ratio in sweep.RATIOS:
        pairs = [(r.accuracy, four_formats(LLAMA[name_of(r)][ratio])) for r in result.rows
                 if r.kind == "press" and not r.question_aware and r.ratio == ratio and name_of(r) in LLAMA]
        if len(pairs) >= 3:
            rho = spearman([p[0] for p in pairs], [p[1] for p in pairs])
            out.append(f"ratio {ratio:g}: Spearman's rho {rho:+.2f} over {len(pairs)} presses")
    return out


def matrix(result: sweep.Sweep) -> str:
    """The presses as "right/items (95 % interval)", a line per press, a column per ratio; then
    the full cache and the quantized caches, with the share of bytes each saves."""
    ratios = sorted({r.ratio for r in result.rows if r.kind == "press"})
    lines = ["| press | " + " | ".join(f"{x:g}" for x in ratios) + " |", "|---|" + "---|" * len(ratios)]
    cells: dict[str, dict] = {}
    others = ["", "| setting | bytes saved (measured) | accuracy (95 % interval) |", "|---|---|---|"]
    for r in result.rows:
        lo, hi = r.interval
        cell = f"{r.right}/{r.items} ({lo:.0%}–{hi:.0%})"
        if r.kind == "press":
            cells.setdefault(name_of(r), {})[r.ratio] = cell
        else:
            others.append(f"| {r.mode} | {r.ratio:.0%} | {cell} |")
    lines += [f"| {name} | " + " | ".join(by.get(x, "") for x in ratios) + " |" for name, by in cells.items()]
    return "\n".join(lines + others)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep", default=str(assets.FOLDER / "shrink_sweep_smollm2.json"))
    p.add_argument("--matrix", action="store_true", help="print the sweep's own table (press × ratio) only")
    args = p.parse_args(argv)
    result = sweep.from_json(Path(args.sweep).read_bytes())
    if args.matrix:
        print(matrix(result))
        return 0
    print(f"Published: {SOURCE}.\nkvviz: {result.model}, {len(result.items)} of {result.items_total} items"
          f"{'' if result.complete else ' (partial)'}.\n")
    print(table(result))
    print("\n" + "\n".join(agreement(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
