"""Rows of the benchmark table, A/B repetitions and medians, and the Markdown they become. Pure."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Callable

OPS = {"<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b, ">": lambda a, b: a > b}
SIGNS = {"<=": "≤", ">=": "≥", ">": ">"}


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


def shown_ratio(result: Result) -> str:
    """The ratio to 3 decimals, or to as many more as its verdict needs: 0.9497 against ≥ 0.95
    reads 0.9497 (FAIL), never 0.950."""
    for digits in range(3, 9):
        shown = f"{result.ratio:.{digits}f}"
        if replace(result, ratio=float(shown)).verdict == result.verdict:
            return shown
    return repr(result.ratio)


def render_table(results: list[Result]) -> str:
    rows = ["| Benchmark | Measured | Baseline | Ratio | Target | Result |",
            "|---|---|---|---|---|---|"]
    rows += [f"| {r.name} | {r.measured} | {r.baseline} | {shown_ratio(r)} | {r.target} | {r.verdict} |"
             for r in results]
    return "\n".join(rows)


def render_doc(machine: dict, command: str, when: str, results: list[Result],
               methods: list[tuple[str, str]]) -> str:
    """docs/benchmarks.md: machine, date, command, the table, one paragraph per benchmark."""
    lines = ["# Benchmarks", "",
             "Written by `python -m bench` (`make bench`); every number below comes from one run of it.", "",
             f"- **Date:** {when}", f"- **Command:** `{command}`"]
    lines += [f"- **{key}:** {value}" for key, value in machine.items()]
    lines += ["", "## Results", "", render_table(results), "",
              "Each ratio compares the medians of interleaved repetitions (A, B, A, B, …) of its two "
              "variants, run side by side in one process; a row without a target is informational.", "", "## Method", ""]
    for title, text in methods:
        lines += [f"### {title}", "", text, ""]
    return "\n".join(lines)
