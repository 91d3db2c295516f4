"""Why a request's prompt stopped matching the prefix cache (kvviz.vllm.reasons): each reason on a
small KV-event stream built to give it (the ledger picks the missed block, reasons says why), and
the rules themselves on a built block log: a cleared block, an edit that realigns, the keys named."""
from kvviz.vllm import reasons
from kvviz.vllm.blocklog import BlockLog
from kvviz.vllm.events import KVEventBatch
from kvviz.vllm.requests import RequestLedger
from tests.vllm.conftest import BS, ledger_of, removed, stored

CHAT_BS = 32  # the chat streams' block size, as served
TEMPLATE = [1, 9690, 198]  # <|im_start|>system\n: every chat prompt's first tokens


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


def test_a_miss_inside_the_first_block_names_the_token_and_the_request():
    system = TEMPLATE + [2683, 359, 253, 10386] + list(range(3000, 3000 + CHAT_BS - 7))  # "You are a careful ..."
    edited = system[:6] + [40196] + system[7:]  # "careful" -> "cautious", one token
    other = TEMPLATE + list(range(5000, 5000 + CHAT_BS - 3))  # another prompt: the template only in common
    ledger = RequestLedger()
    ledger.apply(KVEventBatch(1.0, [stored([1], None, system, "first", block_size=CHAT_BS)], 0))
    ledger.apply(KVEventBatch(2.0, [stored([2], None, other, "other", block_size=CHAT_BS)], 0))
    ledger.apply(KVEventBatch(3.0, [stored([3], None, edited, "edited", block_size=CHAT_BS)], 0))
    rows = {r["request"]: r for r in ledger.rows()}
    assert rows["other"]["reason"] == reasons.FIRST_SEEN  # 3 tokens of template are no edit
    row = rows["edited"]
    assert row["reason"] == reasons.DIVERGED and row["first_miss_token"] == 6
    assert row["miss_reason"] == ("diverged at token 6 from the prefix request first cached: "
                                  "token id 40196 here, 10386 in request first's prompt")


def test_an_edit_that_adds_tokens_is_found_through_the_shift():
    system = TEMPLATE + list(range(3000, 3000 + CHAT_BS - 3))
    longer = system[:6] + [7, 8] + system[7:-1]  # one token became two: the rest shifts by one
    ledger = RequestLedger()
    ledger.apply(KVEventBatch(1.0, [stored([1], None, system, "a", block_size=CHAT_BS)], 0))
    ledger.apply(KVEventBatch(2.0, [stored([2], None, longer, "b", block_size=CHAT_BS)], 0))
    assert ledger.rows()[1]["reason"] == reasons.DIVERGED


def test_a_block_cached_until_a_clear_is_said_cleared_with_when():
    log = BlockLog()
    log.store(7, None, 0, (1, 2, 3, 4), (None, None, ()), "#1", ts=110.0)
    log.clear(112.0)
    miss = reasons.Miss(block_hash=7, parent=None, position=0, tokens=(1, 2, 3, 4), keys=(None, None, ()),
                        block_size=BS, ts=115.0, t0=110.0)
    assert reasons.explain(log, miss) == (
        reasons.CLEARED_CODE, "block 0 was cached until the prefix cache was cleared at t = 2.0 s (3.0 s before)", 0)


def test_an_edit_realigns_and_another_prompt_does_not():
    cached = (1, 2, 3, 4, 5, 6, 7, 8)
    assert reasons.realigned(cached, (1, 2, 9, 3, 4, 5, 6, 7), 2)  # one token inserted: the rest shifts by one
    assert reasons.realigned(cached, (1, 2, 9, 4, 5, 6, 7, 8), 2)  # one token replaced
    assert not reasons.realigned(cached, (1, 2, 90, 91, 92, 93, 94, 95), 2)  # only the start in common
    assert not reasons.realigned(cached, (1, 2, 3, 4, 5, 6, 9, 8), 6)  # one token left after: no evidence


def test_the_keys_besides_the_tokens_are_named():
    assert reasons.keys_text((3, None, ())) == "LoRA 3, no extra keys"
    assert reasons.keys_text((None, "sql", ())) == "LoRA sql, no extra keys"
    assert reasons.keys_text((None, None, ("salt",))) == "no LoRA, extra keys ['salt']"
