"""Per-request cache accounting from KV events (kvviz.vllm.requests.RequestLedger): on the captured
real stream, and on small recorded streams built to test one thing each (grouping without
session_id, interleaved requests, an eviction between a request's reuse and its store, partial
blocks, sessions, reuse inferred from the chain, a drawn copy). Why each request missed is
test_reasons.py's; block residency test_lifetimes.py's."""
from kvviz.vllm import lifetimes, reasons
from kvviz.vllm.events import KVEventBatch, decode_message
from kvviz.vllm.requests import INFERRED, RequestLedger
from tests.vllm.conftest import BS, ledger_of, removed, stored
from vllm_payloads import frames, replayed_pool


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


def test_a_prompt_whose_whole_blocks_all_hit_misses_only_its_partial_tail():
    ledger = ledger_of(
        (0.0, [stored([1, 2], None, range(8))]),
        (1.0, [stored([1, 2], None, range(8), session="s2")]),  # the reuse report, nothing stored
        (2.0, [stored([5], 2, [8, 9, 60, 61], session="s2")]))  # tail + generated tokens
    row = by_name(ledger)["s2"]
    assert row["reason"] == reasons.PARTIAL_TAIL and row["prompt_tokens"] == row["cached_tokens"] == 8
    assert row["stored_blocks"] == 1 and row["first_miss_token"] == 8


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
