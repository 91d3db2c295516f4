"""Block accounting invariants, vLLM-style: tiny pools, an assert after every operation."""
import pytest

from kvviz.core.errors import UserError
from kvviz.core.blocks import BlockPool, cdiv


def check(pool: BlockPool) -> None:
    """Every block is free (ref_cnt 0, in the free list) or owned; counts add up; sizes match."""
    owned = [i for ids in pool.owned.values() for i in ids]
    assert len(owned) == len(set(owned)), "a block is owned twice"
    assert set(owned).isdisjoint(pool.free_ids), "an owned block is also free"
    assert pool.num_free_blocks + len(owned) == pool.num_blocks
    assert pool.get_num_used_blocks() == len(owned)
    for block in pool.blocks:
        assert block.ref_cnt == (1 if block.block_id in owned else 0)
    for seq, ids in pool.owned.items():
        assert len(ids) == cdiv(pool.tokens[seq], pool.block_size)
    assert pool.get_usage() == (len(owned) / pool.num_blocks if pool.num_blocks else 0.0)


def test_growing_one_token_at_a_time():
    pool = BlockPool(num_blocks=4, block_size=4)
    check(pool)
    for tokens in range(1, 17):
        pool.grow(0, tokens)
        check(pool)
        assert pool.get_slots_in_last_block(0) == (tokens - 1) % 4 + 1
    assert pool.num_free_blocks == 0 and pool.get_usage() == 1.0


def test_two_sequences_interleaved_then_freed():
    pool = BlockPool(num_blocks=6, block_size=2)
    pool.grow(0, 3)
    check(pool)
    pool.grow(1, 1)
    check(pool)
    pool.grow(0, 4)  # fills its second block, takes none
    check(pool)
    assert pool.get_num_used_blocks() == 3
    pool.free(0)
    check(pool)
    assert pool.num_free_blocks == 5 and pool.get_slots_in_last_block(0) == 0
    pool.grow(2, 9)  # reuses the freed blocks
    check(pool)
    assert pool.num_free_blocks == 0


def test_over_commit_raises_and_takes_nothing():
    pool = BlockPool(num_blocks=2, block_size=4)
    pool.grow(0, 5)
    check(pool)
    with pytest.raises(MemoryError):
        pool.grow(1, 1)
    check(pool)
    assert pool.num_free_blocks == 0 and 1 not in pool.tokens


def test_shrinking_never_frees_blocks():
    pool = BlockPool(num_blocks=3, block_size=4)
    pool.grow(0, 9)
    pool.grow(0, 2)  # a sequence only grows; its token count stays at the maximum
    check(pool)
    assert pool.get_num_used_blocks() == 3


def test_empty_pool_and_bad_sizes():
    pool = BlockPool(num_blocks=0, block_size=16)
    check(pool)
    assert pool.get_usage() == 0.0
    with pytest.raises(UserError):
        BlockPool(num_blocks=1, block_size=0)
