"""Every request a row (kvviz.vllm.replies): the ledger's event rows joined with a client's request
log, on small built streams and on the real captured fleet (tests/data/vllm/fleet/README.md)."""
from functools import partial

from kvviz.vllm import reasons
from kvviz.vllm.events import KVEventBatch
from kvviz.vllm.replies import BOTH, LOG, joined_rows
from kvviz.vllm.request_log import Reply, read_log
from kvviz.vllm.requests import RequestLedger
from kvviz.vllm.state import request_rows
from tests.vllm import conftest
from tests.vllm.conftest import FLEET

BS = 32
stored = partial(conftest.stored, block_size=BS)


def reply(name, sent_s, cached, prompt=100, url="http://127.0.0.1:8000"):
    return Reply(name=name, session_id=name, url=url, sent_s=sent_s, done_s=sent_s + 0.5,
                 prompt_tokens=prompt, cached_tokens=cached)


def test_an_exact_repeat_without_events_gets_its_row_from_the_log():
    ledger = RequestLedger()
    first = list(range(100, 196))  # 3 whole blocks of a 100-token prompt
    ledger.apply(KVEventBatch(10.0, [stored([1, 2, 3], None, first, "a")], 0))
    rows = joined_rows(ledger, [reply("a", 9.9, 0), reply("a-repeat", 12.0, 96)], BS)
    assert [r["request"] for r in rows] == ["a", "a-repeat"]
    assert rows[0]["source"] == BOTH and rows[0]["vllm_cached_tokens"] == rows[0]["cached_tokens"] == 0
    repeat = rows[1]
    assert repeat["source"] == LOG and repeat["cached_tokens"] == 96 and repeat["reason"] == reasons.PARTIAL_TAIL
    assert "no KV event names it" in repeat["miss_reason"] and repeat["prompt_tokens"] == 96
    assert repeat["t_s"] == 2.0  # on the events' clock


def test_a_reply_whose_request_has_no_event_and_missed_is_said_so():
    rows = joined_rows(RequestLedger(), [reply("x", 5.0, 32, prompt=100)], BS)
    assert rows[0]["reason"] == reasons.NO_EVENT and "32 of 100 prompt tokens cached" in rows[0]["miss_reason"]


def test_replies_match_their_session_s_requests_in_time_order():
    ledger = RequestLedger()
    ledger.apply(KVEventBatch(10.0, [stored([1], None, range(BS), "s")], 0))
    ledger.apply(KVEventBatch(20.0, [stored([5], None, range(50, 50 + BS), "s")], 0))
    rows = joined_rows(ledger, [reply("s", 9.8, 0), reply("s", 15.0, 0), reply("s", 19.9, 0)], BS)
    assert [r["source"] for r in rows] == [BOTH, LOG, BOTH]  # the middle one stored nothing


# --- the captured fleet (tests/data/vllm/fleet/README.md): the real wire data ----------------------
def captured_rows(fleet_capture):
    _, _, states = fleet_capture
    return {r["request"]: r for r in request_rows(states) if r["request"].startswith("cap2-")}


def test_every_captured_request_has_one_row_with_vllm_s_cached_tokens(fleet_capture):
    rows, log = captured_rows(fleet_capture), read_log(FLEET / "requests.jsonl")
    assert sorted(rows) == sorted(r.name for r in log) and len(log) == 18
    for reply in log:
        assert rows[reply.name]["cached_tokens"] == rows[reply.name]["vllm_cached_tokens"] == reply.cached_tokens


def test_the_captured_exact_repeat_is_a_log_row_and_the_edit_names_its_token(fleet_capture):
    rows = captured_rows(fleet_capture)
    repeat = rows["cap2-a-repeat"]  # 128 of 143 tokens cached and no KV event at all
    assert repeat["source"] == LOG and repeat["reason"] == reasons.PARTIAL_TAIL and repeat["cached_tokens"] == 128
    edited = rows["cap2-a-edited"]  # "careful" -> "cautious": token 6, inside the first block
    assert edited["reason"] == reasons.DIVERGED and edited["first_miss_token"] == 6
    assert edited["miss_reason"] == ("diverged at token 6 from the prefix request cap2-a-first cached: "
                                     "token id 18816 here, 5649 in request cap2-a-first's prompt")
    assert {r["source"] for name, r in rows.items() if name != "cap2-a-repeat"} == {BOTH}


