"""Block residency from the block log (kvviz.vllm.lifetimes) on a small KV-event stream built for
it: lifetimes, idle time before eviction, gaps between reuses, reuses per block, and the capacity
sentence (none before the first eviction)."""
from kvviz.vllm import lifetimes, reasons
from kvviz.vllm.events import AllBlocksCleared
from tests.vllm.conftest import ledger_of, removed, stored


def test_lifetimes_and_the_capacity_sentence():
    ledger = ledger_of(
        (0.0, [stored([1, 2], None, range(8))]),
        (2.0, [stored([1, 2], None, range(8))]),  # both reused at 2 s
        (5.0, [removed(2)]),  # idle 3 s
        (8.0, [stored([1], None, range(4)), stored([2], 1, range(4, 8))]),  # needed again 3 s later
        (30.0, [AllBlocksCleared()]))
    log = ledger.log
    lives = lifetimes.lives_frame(log, ledger.t0)
    evicted = lives[lives.ended_by == "evicted"]
    assert evicted.idle_before_eviction_s.tolist() == [3.0] and evicted.lifetime_s.tolist() == [5.0]
    assert sorted(lives.lifetime_s) == [5.0, 22.0, 30.0]
    assert sorted(lifetimes.gaps_frame(log).gap_s) == [2.0, 2.0, 6.0]
    assert lifetimes.capacity_sentence(log) == (
        "1 evicted blocks idled a median of 3.0 s before eviction; 100% were needed again within "
        "10 s of their eviction (stored anew by a later request): a larger pool or CPU offload "
        "would have kept them.")
    assert ledger.rows()[2]["reason"] == reasons.EVICTED
    assert lifetimes.capacity_sentence(ledger_of((0.0, [stored([1], None, range(4))])).log) is None


def test_reuses_are_counted_per_life_cached_now_or_ended():
    ledger = ledger_of(
        (0.0, [stored([1, 2], None, range(8))]),
        (1.0, [stored([1], None, range(4))]),  # block 1 reused
        (2.0, [stored([1], None, range(4)), removed(2)]))  # again; block 2 evicted, never reused
    counts = lifetimes.reuse_counts_frame(ledger.log)
    assert sorted(counts.reuses) == [0, 2]
    assert lifetimes.gaps_frame(ledger.log).gap_s.tolist() == [1.0, 1.0]
    assert "0% were needed again" in lifetimes.capacity_sentence(ledger.log)
