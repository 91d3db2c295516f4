"""Every request a row (kvviz.vllm.replies, request_log): the ledger's event rows joined with a
client's request log, on small built streams; the real captured fleet is in test_fleet.py."""
import json
from pathlib import Path

import pytest

from kvviz.vllm import reasons
from kvviz.vllm.events import BlockStored, KVEventBatch
from kvviz.vllm.trace import Recording, states_at
from kvviz.vllm.replies import BOTH, LOG, joined_rows
from kvviz.vllm.request_log import LogTail, Reply, RequestLogError, parse_lines, read_log
from kvviz.vllm.requests import RequestLedger
from kvviz.vllm.state import request_rows

BS = 32
TEMPLATE = [1, 9690, 198]  # <|im_start|>system\n: every chat prompt's first tokens


def stored(hashes, parent, tokens, session=None):
    return BlockStored(block_hashes=list(hashes), parent_block_hash=parent, token_ids=list(tokens),
                       block_size=BS, lora_id=None, medium="GPU", lora_name=None, session_id=session)


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


def test_a_miss_inside_the_first_block_names_the_token_and_the_request():
    system = TEMPLATE + [2683, 359, 253, 10386] + list(range(3000, 3000 + BS - 7))  # "You are a careful ..."
    edited = system[:6] + [40196] + system[7:]  # "careful" -> "cautious", one token
    other = TEMPLATE + list(range(5000, 5000 + BS - 3))  # another prompt: the template only in common
    ledger = RequestLedger()
    ledger.apply(KVEventBatch(1.0, [stored([1], None, system, "first")], 0))
    ledger.apply(KVEventBatch(2.0, [stored([2], None, other, "other")], 0))
    ledger.apply(KVEventBatch(3.0, [stored([3], None, edited, "edited")], 0))
    rows = {r["request"]: r for r in ledger.rows()}
    assert rows["other"]["reason"] == reasons.FIRST_SEEN  # 3 tokens of template are no edit
    row = rows["edited"]
    assert row["reason"] == reasons.DIVERGED and row["first_miss_token"] == 6
    assert row["miss_reason"] == ("diverged at token 6 from the prefix request first cached: "
                                  "token id 40196 here, 10386 in request first's prompt")


def test_an_edit_that_adds_tokens_is_found_through_the_shift():
    system = TEMPLATE + list(range(3000, 3000 + BS - 3))
    longer = system[:6] + [7, 8] + system[7:-1]  # one token became two: the rest shifts by one
    ledger = RequestLedger()
    ledger.apply(KVEventBatch(1.0, [stored([1], None, system, "a")], 0))
    ledger.apply(KVEventBatch(2.0, [stored([2], None, longer, "b")], 0))
    assert ledger.rows()[1]["reason"] == reasons.DIVERGED


def test_the_request_log_is_read_strictly_and_tailed_by_whole_lines(tmp_path):
    good = {"name": "a", "url": "http://h:1", "sent_s": 1.0, "done_s": 2.0, "prompt_tokens": 10,
            "cached_tokens": 0}
    with pytest.raises(RequestLogError, match="line 2 of the request log"):
        parse_lines(json.dumps(good) + "\n" + json.dumps({**good, "prompt_tokens": -1}))
    with pytest.raises(RequestLogError, match="line 1 .* answered before it was sent"):
        parse_lines(json.dumps({**good, "done_s": 0.5}))
    path = tmp_path / "log.jsonl"
    tail = LogTail(path)
    assert tail.read_new() == []  # not written yet
    path.write_text(json.dumps(good) + "\n" + json.dumps(good)[:10])  # a line still being written
    assert [r.name for r in tail.read_new()] == ["a"]
    with open(path, "a") as f:
        f.write(json.dumps(good)[10:] + "\n")
    assert [r.name for r in tail.read_new()] == ["a"] and tail.read_new() == []


# --- the captured fleet (tests/data/vllm/fleet/README.md): the real wire data ----------------------
FLEET = Path(__file__).resolve().parents[1] / "data" / "vllm" / "fleet"


def captured_rows():
    states = states_at(Recording.load(FLEET / "watch.json"))
    return {r["request"]: r for r in request_rows(states) if r["request"].startswith("cap2-")}


def test_every_captured_request_has_one_row_with_vllm_s_cached_tokens():
    rows, log = captured_rows(), read_log(FLEET / "requests.jsonl")
    assert sorted(rows) == sorted(r.name for r in log) and len(log) == 18
    for reply in log:
        assert rows[reply.name]["cached_tokens"] == rows[reply.name]["vllm_cached_tokens"] == reply.cached_tokens


def test_the_captured_exact_repeat_is_a_log_row_and_the_edit_names_its_token():
    rows = captured_rows()
    repeat = rows["cap2-a-repeat"]  # 128 of 143 tokens cached and no KV event at all
    assert repeat["source"] == LOG and repeat["reason"] == reasons.PARTIAL_TAIL and repeat["cached_tokens"] == 128
    edited = rows["cap2-a-edited"]  # "careful" -> "cautious": token 6, inside the first block
    assert edited["reason"] == reasons.DIVERGED and edited["first_miss_token"] == 6
    assert edited["miss_reason"] == ("diverged at token 6 from the prefix request cap2-a-first cached: "
                                     "token id 18816 here, 5649 in request cap2-a-first's prompt")
    assert {r["source"] for name, r in rows.items() if name != "cap2-a-repeat"} == {BOTH}


def test_a_watch_keeps_its_request_log_through_save_and_load_and_reads_version_1(tmp_path):
    recording = Recording.load(FLEET / "watch.json")
    assert len(recording.replies) == 18 and recording.meta["replicas"] == {
        "http://127.0.0.1:18100": "r0", "http://127.0.0.1:18101": "r1"}
    recording.save(tmp_path / "again.json")
    back = Recording.load(tmp_path / "again.json")
    assert [r.reply for r in back.replies] == [r.reply for r in recording.replies]
    old = json.loads((FLEET / "watch.json").read_text())
    del old["replies"]
    old["version"] = 1
    assert Recording.from_json(json.dumps(old)).replies == []
