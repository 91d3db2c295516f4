"""The prefix cache rebuilt from KV events (kvviz.vllm.pool.CachedBlocks) on the real captured
stream (tests/data/vllm): stores, evictions, the clear and reuse reports counted as the server
counted them, the pool's bound, the prefix tree, replay overlap and a restarted server."""
from kvviz.vllm import views
from kvviz.vllm.metrics import parse_metrics
from kvviz.vllm.pool import CachedBlocks
from vllm_payloads import BLOCK_SIZE, USABLE_BLOCKS, messages, metrics_text, replayed_pool


def test_rebuilt_pool_counts_stores_evictions_clear_and_reuse_reports():
    pool = replayed_pool()
    c = pool.counts
    assert (c.num_removed, c.num_cleared) == (104, 1)
    assert c.reused_tokens == 3840  # == vllm:prefix_cache_hits_total in metrics_after_load
    assert c.num_reused * BLOCK_SIZE == c.reused_tokens
    assert pool.num_cached_blocks == 11  # after the reset only the last request's (347+8-1)//32 blocks
    assert pool.num_cached_blocks <= USABLE_BLOCKS


def test_reported_hits_equal_the_server_s_prefix_cache_hits():
    before_reset = parse_metrics(metrics_text("after_load"))["0"]
    assert replayed_pool().counts.reused_tokens == before_reset.prefix_cache_hits


def test_cached_blocks_never_exceed_the_pool_and_eviction_fills_it():
    pool, peak = CachedBlocks(), 0
    for m in messages():
        pool.apply(m.seq, m.batch)
        peak = max(peak, pool.num_cached_blocks)
        assert pool.num_cached_blocks <= USABLE_BLOCKS
    assert peak >= USABLE_BLOCKS - 8  # evictions start only once the pool is (nearly) full


def test_prefix_tree_shares_the_system_prompt_blocks():
    pool = replayed_pool(upto=60)  # mid-load, before the reset
    leaves = pool.leaves()
    assert len(leaves) > 3
    roots = {pool.path(leaf)[0] for leaf in leaves}
    shared = views.sharers(pool)
    assert max(shared.values()) == len(leaves) >= 4  # the system prompt's first block: every sequence
    assert len(roots) == 1
    for leaf in leaves:
        path = pool.path(leaf)
        assert [pool.blocks[h].depth for h in path] == list(range(len(path)))


def test_replay_overlap_is_skipped_and_a_restart_starts_over():
    msgs = messages()
    pool = replayed_pool(upto=10)
    before = pool.counts.num_stored
    for m in msgs[5:10]:  # a replay overlapping what was already applied
        pool.apply(m.seq, m.batch)
    assert pool.counts.num_stored == before and pool.counts.num_batches == 10
    restarted = msgs[0].batch
    restarted.ts = msgs[9].batch.ts + 100  # a new server: numbers from 0 again, later clock
    pool.apply(0, restarted)
    assert pool.counts.num_restarts == 1 and pool.num_cached_blocks == 10 and pool.last_seq == 0
