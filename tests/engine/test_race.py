"""The no-cache race: fair interleaving and the extrapolation of an unfinished recompute run."""
import pytest

from kvviz.engine import race
from kvviz.core.events import StepEvent


def ev(mode, step, ms, seq_len=10, batch=1):
    positions = batch * (seq_len - 1) if mode == "recompute" or step == 0 else batch
    return StepEvent(mode=mode,
                     phase="prefill" if step == 0 else "decode",
                     step=step,
                     token_ids=(1,) * batch,
                     texts=("x",) * batch,
                     finished=(False,) * batch,
                     step_ms=ms,
                     seq_len=seq_len,
                     positions=positions,
                     kv_bytes=0,
                     formula_bytes=0,
                     layers=(),
                     blocks=None)


def test_recompute_never_runs_ahead_of_the_cached_clock():
    cached = [ev("cached", i, 10.0, 10 + i) for i in range(6)]
    recompute = [ev("recompute", i, 25.0, 10 + i) for i in range(6)]
    order = list(race.interleave(cached, recompute))
    cached_ms = recompute_ms = 0.0
    for e in order:
        if e.mode == "cached":
            cached_ms += e.step_ms
        else:
            assert recompute_ms < cached_ms  # it only starts a step while behind
            recompute_ms += e.step_ms
    assert [e.step for e in order if e.mode == "cached"] == list(range(6))
    # starts at cached clocks 10, 30, 60 ms: each recompute step begins while it is behind
    assert [e.step for e in order if e.mode == "recompute"] == [0, 1, 2]


def test_without_recompute_only_cached_events():
    cached = [ev("cached", i, 10.0) for i in range(3)]
    assert list(race.interleave(cached, None)) == cached


def test_fit_line_exact_on_a_line():
    assert race.fit_line([1, 2, 3], [5, 7, 9]) == (3.0, 2.0)
    assert race.fit_line([4, 4], [1, 3]) == (2.0, 0.0)


def test_extrapolation_uses_measured_steps_and_a_fitted_line():
    # recompute step time = 2 ms per position; measured steps 0..2 at 9, 10, 11 positions
    recompute = [ev("recompute", i, 2.0 * (9 + i), 10 + i) for i in range(3)]
    seq_lens = [9 + i for i in range(5)]  # what each of 5 steps must process
    assert race.extrapolate_total_ms(recompute, seq_lens) == 2.0 * sum(seq_lens)
    assert race.extrapolate_total_ms(recompute[:1], seq_lens) is None  # no decode step yet


def long_prompt_run(recompute_ms, prompt=3045, new_tokens=160):
    """A 3,045-token prompt: cached steps ≈ 110 ms, the recompute's ≈ 16 s (noisy, as measured)."""
    cached = [ev("cached", 0, 16_000.0, prompt + 1)]
    cached += [ev("cached", i, 110.0 + (7 * i) % 11, prompt + 1 + i) for i in range(1, new_tokens)]
    recompute = [ev("recompute", i, ms, prompt + 1 + i) for i, ms in enumerate(recompute_ms)]
    return cached, recompute, [e.seq_len - 1 for e in cached]


def test_reordering_noisy_steps_moves_the_estimate_little():
    noisy = [16_000.0, 17_400.0, 15_100.0, 16_900.0]
    totals = []
    for order in (noisy, [noisy[0], noisy[2], noisy[1], noisy[3]], [noisy[0], noisy[3], noisy[2], noisy[1]]):
        cached, recompute, seq_lens = long_prompt_run(order)
        est = race.estimate_total(cached, recompute, seq_lens)
        assert not est.is_range and est.low_ms == est.high_ms
        totals.append(est.low_ms)
    assert max(totals) / min(totals) <= 1.25
    # 160 steps of ≈ 16 s each: ≈ 43 min, not 3.5 h (nor 4 min)
    assert 0.8 * 160 * 16_350 < totals[0] < 1.25 * 160 * 16_350


def test_recompute_only_fit_on_the_same_steps_is_what_swung():
    """The old fit (recompute decode steps alone) on the same data: the reason for the new one."""
    noisy = [16_000.0, 17_400.0, 15_100.0, 16_900.0]
    alone = [race.modelled_total_ms(r, s, *race.fit_line([e.positions for e in r[1:]], [e.step_ms for e in r[1:]]))
             for r, s in (long_prompt_run(noisy)[1:], long_prompt_run([noisy[0], noisy[2], noisy[1], noisy[3]])[1:])]
    assert min(alone) < 0.8 * max(alone)  # here it even turns negative


def test_fewer_than_three_steps_give_a_range_around_the_truth():
    cached, recompute, seq_lens = long_prompt_run([16_000.0, 16_400.0])
    est = race.estimate_total(cached, recompute, seq_lens)
    assert est.is_range and est.low_ms < 160 * 16_200 < est.high_ms


def test_short_prompt_estimate_follows_the_measured_cost_line():
    """Steps cost 62 ms + 4.3 ms per position (SmolLM2 on the CPU); cached decode steps 66 ms."""
    cost = lambda n: 62.0 + 4.3 * n  # noqa: E731
    cached = [ev("cached", 0, cost(32), 33)] + [ev("cached", i, 66.0, 33 + i) for i in range(1, 128)]
    recompute = [ev("recompute", i, cost(32 + i) * (1.1 if i % 2 else 0.9), 33 + i) for i in range(6)]
    seq_lens = [e.seq_len - 1 for e in cached]
    truth = sum(cost(n) for n in seq_lens)
    est = race.estimate_total(cached, recompute, seq_lens)
    assert abs(est.low_ms / truth - 1) < 0.15


def test_no_estimate_before_a_recompute_step_or_after_it_finished():
    cached, _, seq_lens = long_prompt_run([])
    assert race.estimate_total(cached, [], seq_lens) is None
    full = [ev("recompute", i, 100.0, 3046 + i) for i in range(160)]
    assert race.estimate_total(cached, full, seq_lens) is None


def test_the_modelled_remainder_adds_up_to_the_whole_run_estimate():
    """The steps the no-cache run did not make, drawn dashed on the race chart: each grows with the
    positions it reads, and with the measured steps they add up to the estimate the captions quote."""
    cached = [ev("cached", i, 100.0 if i == 0 else 10.0, 10 + i) for i in range(8)]
    recompute = [ev("recompute", i, 100.0 + 5 * i, 10 + i) for i in range(3)]
    rest = race.modelled_remainder_ms(cached, recompute)
    assert len(rest) == 5 and rest == sorted(rest) and rest[0] > 0
    total = race.extrapolate_total_ms(recompute, [e.seq_len - 1 for e in cached], cached)
    assert sum(e.step_ms for e in recompute) + sum(rest) == pytest.approx(total)
    assert race.modelled_remainder_ms(cached, recompute[:1]) == []  # no decode step: nothing to fit
    assert race.modelled_remainder_ms(cached[:3], recompute) == []  # it finished
