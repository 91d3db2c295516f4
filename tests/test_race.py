"""The no-cache race: fair interleaving and the extrapolation of an unfinished recompute run."""
from kvviz import race
from kvviz.events import StepEvent


def ev(mode, step, ms, seq_len=10, batch=1):
    positions = batch * (seq_len - 1) if mode == "recompute" or step == 0 else batch
    return StepEvent(mode, "prefill" if step == 0 else "decode", step, (1,) * batch, ("x",) * batch,
                     (False,) * batch, ms, seq_len, positions, 0, 0, (), None)


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
