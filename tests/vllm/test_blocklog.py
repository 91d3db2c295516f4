"""The log of every block the KV events named (kvviz.vllm.blocklog): copies counted, a life ended
by its last copy's eviction or a clear with how full the pool was, a hash stored again starting a
new life, and the ended lives kept bounded."""
from kvviz.vllm import blocklog
from kvviz.vllm.blocklog import CLEARED, EVICTED, BlockLog

KEYS = (None, None, ())


def store(log: BlockLog, block_hash: int, ts: float, parent=None, owner: str = "#1") -> None:
    log.store(block_hash, parent, 0 if parent is None else 1, (block_hash,) * 4, KEYS, owner, ts)


def test_a_life_ends_with_its_last_copy_and_says_how_full_the_pool_was():
    log = BlockLog()
    store(log, 1, 0.0)
    store(log, 1, 1.0)  # a second copy (two requests computed it): one life
    store(log, 2, 1.0, parent=1)
    log.use(1, 3.0)
    assert log.num_cached == 3 and len(log.live) == 2 and log.live[1].stored_s == 0.0
    log.remove(1, 4.0)
    assert log.is_cached(1) and not log.ended
    log.remove(1, 5.0)
    (life,) = log.ended
    assert (life.block_hash, life.ended_by, life.ended_s, life.cached_then) == (1, EVICTED, 5.0, 2)
    assert life.uses_s == [3.0] and life.last_use_s == 3.0 and not log.is_cached(1) and log.num_cached == 1
    assert log.known(1) is life and log.last_end[1] is life


def test_a_hash_stored_again_starts_a_new_life_and_says_how_soon():
    log = BlockLog()
    store(log, 1, 10.0)
    log.remove(1, 12.0)
    store(log, 1, 12.5, owner="#2")
    assert list(log.restored_after_s) == [0.5]
    assert log.known(1).owner == "#2" and log.last_end[1].owner == "#1"
    assert log.live[1].last_use_s == 12.5  # never reused: its store


def test_removing_a_block_stored_before_kvviz_attached_changes_nothing():
    log = BlockLog()
    store(log, 1, 0.0)
    log.remove(99, 1.0)
    assert log.num_cached == 1 and not log.ended and log.known(99) is None


def test_a_clear_ends_every_life_at_once():
    log = BlockLog()
    for h in (1, 2, 3):
        store(log, h, float(h))
    log.clear(9.0)
    assert log.num_cached == 0 and not log.live and not log.copies
    assert {(life.block_hash, life.ended_by, life.cached_then) for life in log.ended} == {
        (1, CLEARED, 3), (2, CLEARED, 3), (3, CLEARED, 3)}
    store(log, 1, 10.0)
    assert list(log.restored_after_s) == []  # a cleared block stored again was not evicted


def test_the_oldest_ended_lives_are_dropped_past_the_bound(monkeypatch):
    monkeypatch.setattr(blocklog, "MAX_LIVES", 2)
    log = BlockLog()
    for h in (1, 2, 3):
        store(log, h, 0.0)
        log.remove(h, float(h))
    assert [life.block_hash for life in log.ended] == [2, 3]
    assert 1 not in log.last_end and log.known(1) is None and log.known(3).ended_s == 3.0
