"""The no-cache race: interleave a cached and a recompute run on one device, fairly.

Both runs share one device, so they take turns, one step at a time, and each step is timed
alone. After every cached step the recompute run advances only while its own clock (the sum
of its measured steps) is behind the cached clock, so at every moment each panel shows how far
its mode gets in the same amount of compute. When the cached run ends, the recompute run stops
too; `estimate_total` estimates what finishing it would have cost, from the measured steps.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable, Iterator

from kvviz.core.events import StepEvent


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


MIN_FIT_STEPS = 3  # recompute steps (its prefill included) before the estimate is one number
RANGE_SPREAD = 0.25  # with fewer steps: the range the single-step fits span, widened this much


@dataclass(frozen=True)
class RaceEstimate:
    """What finishing the no-cache run would take: one number once it is stable, else a range."""

    low_ms: float
    high_ms: float
    measured_steps: int  # recompute steps (prefill included) it was fitted to

    @property
    def is_range(self) -> bool:
        return self.measured_steps < MIN_FIT_STEPS


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y on x; slope 0 with fewer than two distinct x."""
    if len(set(xs)) < 2:
        return sum(ys) / len(ys), 0.0
    fit = statistics.linear_regression(xs, ys)
    return fit.intercept, fit.slope


def step_cost_fit(events: list[StepEvent]) -> tuple[float, float]:
    """(a, b) of `step_ms = a + b * positions` over every measured forward pass in `events`.

    Any forward pass over n new positions costs about a fixed a (launching every layer) plus b
    per position, so the cached run's decode steps (1 position each) pin the intercept and the
    recompute steps (the whole text each) the slope: a fit over the recompute steps alone spans
    a few positions, and noise there made its slope, and the estimate, swing 60-fold. Kept
    non-negative: a negative slope falls back to the mean, a negative intercept to cost ∝ n.
    """
    xs, ys = [float(e.positions) for e in events], [e.step_ms for e in events]
    a, b = fit_line(xs, ys)
    if b < 0:
        return sum(ys) / len(ys), 0.0
    if a < 0:
        return 0.0, sum(ys) / max(sum(xs), 1.0)
    return a, b


def modelled_total_ms(recompute: list[StepEvent], seq_lens: list[int], a: float, b: float) -> float:
    """The recompute run's time for steps at `seq_lens`: measured where run, a + b·n elsewhere."""
    measured = {e.step: e.step_ms for e in recompute}
    batch = len(recompute[0].token_ids) if recompute else 1
    return sum(measured.get(step, a + b * batch * seq_len) for step, seq_len in enumerate(seq_lens))


def estimate_total(cached: list[StepEvent], recompute: list[StepEvent],
                   seq_lens: list[int]) -> RaceEstimate | None:
    """The whole recompute run's time (its prefill plus every step at `seq_lens` positions).

    Fitted to the cached run's steps with the recompute steps measured so far (`step_cost_fit`);
    with fewer than MIN_FIT_STEPS recompute steps, a range: the fits to each step alone,
    widened by RANGE_SPREAD. None before any recompute step or when it already finished.
    """
    if not recompute or len(recompute) >= len(seq_lens):
        return None
    if len(recompute) >= MIN_FIT_STEPS:
        total = modelled_total_ms(recompute, seq_lens, *step_cost_fit(cached + recompute))
        return RaceEstimate(total, total, len(recompute))
    totals = [modelled_total_ms(recompute, seq_lens, *step_cost_fit(cached + [e])) for e in recompute]
    return RaceEstimate(min(totals) * (1 - RANGE_SPREAD), max(totals) * (1 + RANGE_SPREAD), len(recompute))


def extrapolate_total_ms(recompute: list[StepEvent], seq_lens: list[int],
                         cached: list[StepEvent] = ()) -> float | None:
    """The point estimate of `estimate_total` (its middle when a range); None without a decode step."""
    if not any(e.phase == "decode" for e in recompute):
        return None
    if len(recompute) >= len(seq_lens):
        return modelled_total_ms(recompute, seq_lens, *step_cost_fit(list(recompute)))
    est = estimate_total(list(cached), recompute, seq_lens)
    return (est.low_ms + est.high_ms) / 2


def modelled_remainder_ms(cached: list[StepEvent], recompute: list[StepEvent]) -> list[float]:
    """The modelled time of each step the recompute run did not make (its steps len(recompute) to
    len(cached) - 1), for drawing: each in proportion to the fitted a + b·n at its length
    (`step_cost_fit`), scaled so that with the measured steps they add up to `extrapolate_total_ms`,
    the whole-run estimate the captions quote. [] when the run finished or has no decode step."""
    seq_lens = [e.seq_len - 1 for e in cached]
    total = extrapolate_total_ms(recompute, seq_lens, cached)
    if total is None or len(recompute) >= len(cached):
        return []
    a, b = step_cost_fit(list(cached) + list(recompute))
    batch = len(recompute[0].token_ids)
    shape = [a + b * batch * n for n in seq_lens[len(recompute):]]
    rest = total - sum(e.step_ms for e in recompute)
    return [rest * ms / sum(shape) for ms in shape] if sum(shape) > 0 else [rest / len(shape)] * len(shape)


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
