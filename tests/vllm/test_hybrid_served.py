"""The never-hits sentence and kvviz's event-derived hit accounting against a SERVED tiny hybrid: a
real capture (tests/data/vllm/hybrid/README.md, written by scripts/vllm_hybrid_served_check.py: a
tiny Qwen3-Next-style model served by vLLM 0.32 CPU with `--block-size 32`, prefix caching and KV
events, watched by kvviz's EngineWatch), read without a server.

For every request of the capture, three figures agree: vLLM's own `cached_tokens`; what kvviz's
fleet view says the server held of the prompt when it was sent (the prompt walked down the cache
the KV events rebuilt, cut back to where the Mamba-style state was kept); and the never-hits
sentence's hit block (288 = lcm of the cache groups' blocks, from the events; the planner's figure
for the model's config, recorded when capturing), not the 32 asked with --block-size. The vLLM
page's per-request rows (the ledger, kvviz.vllm.requests) give the same figures, one row per request.
"""
from pathlib import Path

import pytest

from kvviz.vllm import fleet, views, would_hit
from kvviz.vllm.events import BlockRemoved, BlockStored, KVEventBatch
from kvviz.vllm.pool import CachedBlocks
from kvviz.vllm.trace import Recording, states_at

HYBRID = Path(__file__).resolve().parents[1] / "data" / "vllm" / "hybrid"


@pytest.fixture(scope="module")
def captured():
    recording = Recording.load(HYBRID / "watch.json")
    (state,) = states_at(recording).values()
    return recording, fleet.fleet_requests(recording), state


def shared_tokens(name: str) -> int:
    """L575-second shares its first 575 tokens with L575-first; a first request shares nothing."""
    return int(name.split("-")[0][1:]) if name.endswith("-second") else 0


def test_the_hit_block_is_the_groups_lcm_not_the_block_size_asked(captured):
    recording, _, state = captured
    asked = recording.meta["hybrid_check"]["block_size_asked"]
    block, source = views.hit_block(state)
    assert (block, source, asked) == (288, "events", 32)
    assert state.pool.group_block_sizes == {0: 288, 1: 288, 2: 288, 3: 288}
    assert set(state.pool.states.held) == {0, 1, 2}  # the Gated DeltaNet groups; 3 is full attention
    sentence = views.never_hits_sentence(state)
    assert "a shared prefix shorter than 288 tokens never hits on this server" in sentence
    assert "⌊prefix / 288⌋ × 288" in sentence
    # the planner's hit block for config.json, as the script computed it when capturing (building the
    # config's layout costs seconds: tests/planner/test_vllm_hybrid.py checks the planner itself)
    assert recording.meta["hybrid_check"]["hit_block_planned"] == block


def test_every_request_s_cached_tokens_is_what_the_events_held(captured):
    _, view, _ = captured
    lengths = [shared_tokens(r.name) for r in view.requests if r.name.endswith("-second")]
    assert lengths == [287, 288, 289, 575, 576, 577] and len(view.requests) == 12
    for r in view.requests:
        assert r.complete and r.cached_tokens is not None
        assert r.held[r.replica] == r.cached_tokens, r.row()


def test_the_sentence_bounds_every_request_and_is_reached_where_the_state_was_kept(captured):
    _, view, state = captured
    block, _ = views.hit_block(state)
    cached = {shared_tokens(r.name): r.cached_tokens for r in view.requests if r.name.endswith("-second")}
    for shared, tokens in cached.items():
        assert tokens % block == 0 and tokens <= shared // block * block
        if shared < block:
            assert tokens == 0  # "a shared prefix shorter than 288 tokens never hits"
    # reached just under, at and just over the hit block and twice it (a block of --block-size's 32
    # would predict 256 for 287 and 288 + 32 for 289, where vLLM gave 0 and 288)
    for shared in (287, 288, 289, 576, 577):
        assert cached[shared] == shared // block * block, shared
    assert [cached[s] for s in (287, 288, 289, 576, 577)] == [0, 288, 288, 576, 576]
    # 575 = 2 × 288 − 1: the attention blocks hold 288 of it, but the first request (639 tokens) kept
    # the linear-attention state only at 576, its last whole block: vLLM reuses nothing
    assert cached[575] == 0


def test_the_would_hit_sentence_says_the_state_was_not_kept(captured):
    recording, _, _ = captured
    logged = {r.reply.name: r for r in recording.replies}
    (state,) = states_at(recording, logged["L575-first"].t_s).values()  # before L575-second was sent
    ids = logged["L575-second"].reply.prompt_token_ids
    check = would_hit.check(state.pool, ids, 288)
    assert (check.cached_tokens, check.attention_blocks) == (0, 1)
    assert "the cached blocks match 288 tokens, but the model's state" in check.sentence()


def test_the_vllm_page_s_request_rows_agree_one_row_per_request(captured):
    """The single-server ledger (the vLLM page's per-request table): the state groups' events name
    the same requests again; they neither add rows nor turn a recomputed block into a hit."""
    recording, _, state = captured
    rows = state.request_rows()
    assert [row["request"] for row in rows] == [r.reply.name for r in recording.replies]
    for row in rows:
        assert row["cached_tokens"] == row["vllm_cached_tokens"], row
    recomputed = {row["request"]: row for row in rows}["L575-second"]
    assert recomputed["reason"] == "recomputed"
    assert "the model's state (Mamba / linear attention) was not kept at it" in recomputed["miss_reason"]


def stored(hashes, tokens, parent=None, group=0, kind="full_attention", size=2):
    return BlockStored(block_hashes=hashes, parent_block_hash=parent, token_ids=tokens, block_size=size,
                       lora_id=None, medium="GPU", lora_name=None, group_idx=group, kv_cache_spec_kind=kind)


def test_a_state_group_s_sparse_store_neither_misplaces_tokens_nor_counts_as_a_hit():
    pool = CachedBlocks()
    pool.apply(0, KVEventBatch(1.0, [stored([20], [1, 2, 3, 4], kind="mamba"),  # state kept at block 1 only
                                     stored([10, 20], [1, 2, 3, 4], group=1)], 0))
    assert pool.blocks[20].token_ids == (3, 4) and pool.blocks[20].parent == 10
    assert would_hit.check(pool, [1, 2, 3, 4, 5], 2).cached_blocks == 2
    assert would_hit.check(pool, [1, 2, 9, 9, 5], 2).cached_blocks == 0  # block 0 matches, no state there
    # a new state stored at block 0 (its hash already held by the attention group) is a store, not a hit
    pool.apply(1, KVEventBatch(2.0, [stored([10], [1, 2], kind="mamba")], 0))
    assert pool.counts.num_reused == 0 and would_hit.check(pool, [1, 2, 9, 9, 5], 2).cached_blocks == 1
    pool.apply(2, KVEventBatch(3.0, [BlockRemoved(block_hashes=[10], medium="GPU", group_idx=0)], 0))
    assert would_hit.check(pool, [1, 2, 9, 9, 5], 2).cached_blocks == 0  # that state evicted
