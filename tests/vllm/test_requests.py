"""Per-request cache accounting and block lifetimes from KV events (kvviz.vllm.requests, reasons,
lifetimes): on the captured real stream, and on small recorded streams built to test one thing
each (grouping without session_id, interleaved requests, an eviction between a request's reuse
and its store, partial blocks, extra keys, sessions)."""
from kvviz.vllm import lifetimes, reasons, would_hit
from kvviz.vllm.events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch, decode_message
from kvviz.vllm.requests import INFERRED, RequestLedger
from vllm_payloads import frames
from tests.vllm.test_readers import replayed_pool

BS = 4  # block size of the built streams


def stored(hashes, parent, tokens, session=None, lora=None):
    return BlockStored(block_hashes=list(hashes), parent_block_hash=parent, token_ids=list(tokens),
                       block_size=BS, lora_id=lora, medium="GPU", lora_name=None, session_id=session)


def removed(*hashes):
    return BlockRemoved(block_hashes=list(hashes), medium="GPU")


def ledger_of(*steps) -> RequestLedger:
    """steps: (ts, [events]) in order."""
    ledger = RequestLedger()
    for ts, events in steps:
        ledger.apply(KVEventBatch(ts, events, 0))
    return ledger


def by_name(ledger):
    return {r["request"]: r for r in ledger.rows()}


def test_captured_stream_cached_tokens_equal_the_server_s_hits():
    ledger = RequestLedger()
    for f in frames():
        ledger.apply(decode_message(f).batch)
    rows = ledger.rows()
    assert len(rows) == 26  # 1 + 24 + 1 requests (tests/data/vllm/README.md)
    assert sum(r["cached_tokens"] for r in rows) == 3840  # vllm:prefix_cache_hits_total
    assert rows[0]["reason"] == reasons.FIRST_SEEN and rows[0]["prompt_tokens"] == 320  # 331 tokens
    shared = rows[1:25]
    assert {r["reason"] for r in shared} == {reasons.DIVERGED}
    assert {r["cached_tokens"] for r in shared} == {160}  # the system prompt's 5 whole blocks
    assert all(r["first_miss_token"] > 160 for r in shared)  # the template's user turn is shared too
    assert rows[25]["reason"] == reasons.CLEARED_CODE  # asked again after the reset
    pool = replayed_pool()  # every stored block goes to exactly one request
    assert sum(r["stored_blocks"] for r in rows) == pool.counts.num_stored == 183


def test_interleaved_requests_without_session_id_are_told_apart_by_their_chains():
    a, b = range(0, 8), range(100, 108)
    ledger = ledger_of(
        (0.0, [stored([1, 2], None, a), stored([11, 12], None, b)]),
        (1.0, [stored([13], 12, range(108, 112)), stored([3], 2, range(8, 12))]),
        (2.0, [stored([4], 3, range(12, 16))]))
    rows = by_name(ledger)
    assert rows["#1"]["stored_blocks"] == 4 and rows["#2"]["stored_blocks"] == 3
    assert rows["#1"]["prompt_tokens"] == rows["#2"]["prompt_tokens"] == 2 * BS  # first step only
    assert rows["#1"]["reason"] == rows["#2"]["reason"] == reasons.FIRST_SEEN


def test_reuse_report_then_eviction_then_store_is_one_request():
    """vLLM reports the hit, evicts to make room, then stores the request's new blocks."""
    ledger = ledger_of(
        (0.0, [stored([1, 2, 3], None, range(12))]),
        (5.0, [stored([1, 2], None, range(8)), removed(3), stored([7], 2, [8, 9, 50, 51])]))
    first, second = ledger.rows()
    assert second["reused_blocks"] == 2 and second["cached_tokens"] == 2 * BS
    assert second["stored_blocks"] == 1 and second["prompt_tokens"] == 3 * BS
    assert second["reason"] == reasons.DIVERGED and second["first_miss_token"] == 10
    assert "request #1" in second["miss_reason"]


def test_an_evicted_block_is_named_with_its_time_and_the_pool_then():
    ledger = ledger_of(
        (100.0, [stored([1, 2, 3], None, range(12))]),
        (103.0, [removed(3)]),
        (104.0, [stored([1, 2], None, range(8)), stored([3], 2, range(8, 12))]))
    ledger.usable_blocks = 23
    row = ledger.rows()[1]
    assert row["reason"] == reasons.EVICTED and row["cached_tokens"] == 2 * BS
    assert "evicted at t = 3.0 s (1.0 s before)" in row["miss_reason"]
    assert "3 blocks cached then" in row["miss_reason"]


def test_a_prompt_whose_whole_blocks_all_hit_misses_only_its_partial_tail():
    ledger = ledger_of(
        (0.0, [stored([1, 2], None, range(8))]),
        (1.0, [stored([1, 2], None, range(8), session="s2")]),  # the reuse report, nothing stored
        (2.0, [stored([5], 2, [8, 9, 60, 61], session="s2")]))  # tail + generated tokens
    row = by_name(ledger)["s2"]
    assert row["reason"] == reasons.PARTIAL_TAIL and row["prompt_tokens"] == row["cached_tokens"] == 8
    assert row["stored_blocks"] == 1 and row["first_miss_token"] == 8


def test_same_tokens_under_another_hash_is_a_lora_or_salt_or_multimodal_miss():
    ledger = ledger_of((0.0, [stored([1], None, range(4))]),
                       (1.0, [stored([9], None, range(4), lora=3)]))
    row = ledger.rows()[1]
    assert row["reason"] == reasons.EXTRA_KEYS and "LoRA 3" in row["miss_reason"]


def test_a_first_block_sharing_little_is_first_seen_and_much_is_diverged():
    ledger = ledger_of((0.0, [stored([1], None, [0, 1, 2, 3])]),
                       (1.0, [stored([2], None, [0, 9, 9, 9])]),   # 1 token in common: < BS / 4 + ...
                       (2.0, [stored([3], None, [0, 1, 2, 7])]))   # 3 in common
    _, second, third = ledger.rows()
    assert second["reason"] == reasons.DIVERGED and second["first_miss_token"] == 1  # BS // 4 == 1
    assert third["reason"] == reasons.DIVERGED and third["first_miss_token"] == 3
    ledger = ledger_of((0.0, [stored([1], None, [0, 1, 2, 3])]), (1.0, [stored([2], None, [5, 1, 2, 3])]))
    assert ledger.rows()[1]["reason"] == reasons.FIRST_SEEN


def test_sessions_group_requests_whose_chains_look_alike():
    ledger = ledger_of(
        (0.0, [stored([1], None, range(4), session="x")]),
        (1.0, [stored([1], None, range(4), session="y"), stored([2], 1, range(4, 8), session="y")]),
        (2.0, [stored([3], 1, range(10, 14), session="x"), stored([4], 2, range(8, 12), session="y")]),
        (3.0, [stored([1], None, range(4), session="x")]))  # the same session asks again
    rows = by_name(ledger)
    assert rows["x"]["stored_blocks"] == 2 and rows["y"]["stored_blocks"] == 2
    assert rows["y"]["cached_tokens"] == BS and rows["x#2"]["reason"] == reasons.PARTIAL_TAIL


def test_a_store_continuing_no_known_request_infers_its_reuse_from_the_chain():
    ledger = ledger_of((0.0, [stored([1, 2], None, range(8))]),
                       (1.0, [stored([3], 1, [4, 5, 6, 9])]))  # no reuse report (report mode off)
    row = ledger.rows()[1]
    assert row["reused_blocks"] == 1 and row["reuse_source"] == INFERRED
    assert row["reason"] == reasons.DIVERGED and row["first_miss_token"] == 7


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


def test_would_hit_walks_the_cached_tree_block_by_block():
    pool = replayed_pool()
    size = 32
    leaf = max(pool.leaves(), key=lambda h: len(pool.path(h)))
    path = pool.path(leaf)
    assert pool.blocks[path[0]].parent is None and len(path) >= 4
    ids = [t for h in path for t in pool.blocks[h].token_ids]
    whole = would_hit.check(pool, ids + [1, 2, 3], size)
    assert whole.cached_blocks == len(path) and whole.cached_tokens == len(path) * size
    assert "every whole block it can reuse is cached" in whole.sentence()
    assert would_hit.check(pool, ids, size).cached_blocks == len(path) - 1  # the last token's block
    edited = list(ids)
    edited[2 * size + 5] = -1
    stop = would_hit.check(pool, edited, size)
    assert (stop.cached_blocks, stop.closest_common) == (2, 5)
    assert "stops at token 64" in stop.sentence() and "differs at token 69" in stop.sentence()
    assert would_hit.check(pool, [-1] * 100, size).sentence().endswith("no cached block continues it.")


def test_a_cached_block_computed_again_and_a_prefix_never_continued():
    recomputed = ledger_of((0.0, [stored([1, 2], None, range(8))]),
                           (1.0, [stored([1], None, range(4)), stored([2], 1, range(4, 8))]))
    row = recomputed.rows()[1]
    assert row["reason"] == reasons.RECOMPUTED and row["cached_tokens"] == BS and "request #1" in row["miss_reason"]
    extends = ledger_of((0.0, [stored([1], None, range(4))]),
                        (1.0, [stored([1], None, range(4)), stored([5], 1, [9, 9, 9, 9])]))
    row = extends.rows()[1]
    assert row["reason"] == reasons.EXTENDS and row["first_miss_token"] == BS
    assert row["miss_reason"].startswith("the first 4 tokens were cached (request #1)")


def test_a_drawn_copy_keeps_its_rows_while_the_ledger_goes_on():
    import copy
    ledger = ledger_of((0.0, [stored([1, 2], None, range(8))]), (1.0, [stored([1], None, range(4))]),
                       (2.0, [removed(2)]))
    drawn = copy.deepcopy(ledger)
    assert drawn.rows() == ledger.rows()
    assert lifetimes.lives_frame(drawn.log, 0.0).equals(lifetimes.lives_frame(ledger.log, 0.0))
    ledger.apply(KVEventBatch(3.0, [stored([1], None, range(4)), removed(1)], 0))
    assert len(drawn.rows()) == 2 and drawn.log.live[1].uses_s == [1.0]
    assert len(ledger.rows()) == 3 and ledger.log.last_end[1].uses_s == [1.0, 3.0]
