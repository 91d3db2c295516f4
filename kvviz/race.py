"""The no-cache race: interleave a cached and a recompute run on one device, fairly.

Both runs share one device, so they take turns, one step at a time, and each step is timed
alone. After every cached step the recompute run advances only while its own clock (the sum
of its measured steps) is behind the cached clock, so at every moment each panel shows how far
its mode gets in the same amount of compute. When the cached run ends, the recompute run stops
too; `extrapolate_total_ms` estimates what finishing it would have cost, from its own steps.
"""
from __future__ import annotations

from typing import Iterable, Iterator

from kvviz.events import StepEvent


def interleave(cached: Iterable[StepEvent], recompute: Iterable[StepEvent] | None) -> Iterator[StepEvent]:
    """Yield cached events, each followed by the recompute events its clock allows."""
    behind = iter(recompute) if recompute is not None else iter(())
    cached_ms = recompute_ms = 0.0
    for event in cached:
        cached_ms += event.step_ms
        yield event
        while recompute_ms < cached_ms:
            nxt = next(behind, None)
            if nxt is None:
                break
            recompute_ms += nxt.step_ms
            yield nxt


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y on x; slope 0 with fewer than two distinct x."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    var = sum((x - mean_x) ** 2 for x in xs)
    if var == 0:
        return mean_y, 0.0
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / var
    return mean_y - slope * mean_x, slope


def extrapolate_total_ms(recompute: list[StepEvent], seq_lens: list[int]) -> float | None:
    """Recompute time for steps at `seq_lens`: measured where run, a fitted line elsewhere.

    A recompute step processes the whole sequence, so its time grows with the sequence length;
    the decode steps measured so far fit `step_ms = a + b * positions`. None when no decode
    step was measured.
    """
    decode = [e for e in recompute if e.phase == "decode"]
    if not decode:
        return None
    a, b = fit_line([e.positions for e in decode], [e.step_ms for e in decode])
    measured = {e.step: e.step_ms for e in recompute}
    batch = decode[0].positions // max(decode[0].seq_len - 1, 1)
    total = 0.0
    for step, seq_len in enumerate(seq_lens):
        total += measured.get(step, max(a + b * batch * seq_len, 0.0))
    return total


def race_order(cached: list[StepEvent], recompute: list[StepEvent]) -> list[StepEvent]:
    """A recorded run's events in the order the live race shows them."""
    return list(interleave(cached, recompute or None))


def through_step(order: list[StepEvent], step: int) -> list[StepEvent]:
    """The race up to cached step `step`, with the recompute steps that ran alongside it."""
    out = []
    for event in order:
        if event.mode == "cached" and event.step > step:
            break
        out.append(event)
    return out
