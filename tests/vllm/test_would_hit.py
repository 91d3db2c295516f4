"""Would a prompt hit the prefix cache (kvviz.vllm.would_hit): the captured stream's cache
(tests/data/vllm) walked block by block, where the match stops and why."""
from kvviz.vllm import would_hit
from vllm_payloads import replayed_pool


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
