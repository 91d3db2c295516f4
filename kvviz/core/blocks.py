"""Paged-block accounting in vLLM's vocabulary, for a cache that is really contiguous.

Hugging Face's DynamicCache keeps one contiguous tensor per layer. A paged allocator (vLLM's
`BlockPool`) would instead hand out fixed-size blocks of `block_size` token slots as a sequence
grows. This module models that allocator so the dashboard can show what the same tokens would
occupy there. Invariants, checked by the tests after every operation:

* every block is either free (ref_cnt == 0, in the free list) or owned (ref_cnt > 0);
* num_free_blocks + used blocks == num_blocks;
* a sequence of n tokens owns exactly ceil(n / block_size) blocks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from kvviz.core.errors import UserError


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class KVCacheBlock:
    block_id: int  # index in the pool
    ref_cnt: int = 0  # sequences using this block; 0 means free


@dataclass(kw_only=True)
class BlockPool:
    """A fixed pool of blocks; sequences take blocks as they grow and free them when done."""

    num_blocks: int
    block_size: int
    blocks: list[KVCacheBlock] = field(init=False)
    free_ids: list[int] = field(init=False)  # free list, lowest id handed out first
    owned: dict[int, list[int]] = field(init=False)  # seq id -> block ids, in order
    tokens: dict[int, int] = field(init=False)  # seq id -> tokens stored

    def __post_init__(self) -> None:
        if self.num_blocks < 0 or self.block_size < 1:
            raise UserError("num_blocks must be >= 0 and block_size >= 1")
        self.blocks = [KVCacheBlock(i) for i in range(self.num_blocks)]
        self.free_ids = list(range(self.num_blocks))
        self.owned, self.tokens = {}, {}

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_ids)

    def get_num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def get_usage(self) -> float:
        """Fraction of the pool's blocks in use (vLLM: `BlockPool.get_usage`)."""
        return self.get_num_used_blocks() / self.num_blocks if self.num_blocks else 0.0

    def take_free_blocks(self, n: int) -> list[int]:
        """Pop `n` free blocks; raises MemoryError (and takes none) if the pool has fewer."""
        if n > self.num_free_blocks:
            raise MemoryError(f"need {n} blocks, {self.num_free_blocks} free")
        ids, self.free_ids = self.free_ids[:n], self.free_ids[n:]
        for i in ids:
            self.blocks[i].ref_cnt += 1
        return ids

    def grow(self, seq: int, num_tokens: int) -> None:
        """Make sequence `seq` hold `num_tokens` tokens in total, taking blocks as needed."""
        have = self.owned.get(seq, [])
        taken = self.take_free_blocks(max(cdiv(num_tokens, self.block_size) - len(have), 0))
        self.owned[seq] = have + taken  # only after the pool could serve it: all or nothing
        self.tokens[seq] = max(num_tokens, self.tokens.get(seq, 0))

    def free(self, seq: int) -> None:
        """Return every block of `seq` to the pool (when a request finishes)."""
        for i in reversed(self.owned.pop(seq, [])):
            self.blocks[i].ref_cnt -= 1
            if self.blocks[i].ref_cnt == 0:
                self.free_ids.insert(0, i)
        self.tokens.pop(seq, None)

    def get_slots_in_last_block(self, seq: int) -> int:
        """Filled slots of the sequence's last block (block_size when it is full, 0 when empty)."""
        n = self.tokens.get(seq, 0)
        return 0 if n == 0 else n - (len(self.owned[seq]) - 1) * self.block_size


def hit_block_sentence(hit_block: int, groups: str = "", where: str = "on this server") -> str:
    """"A shared prefix shorter than N tokens never hits": N, the tokens vLLM's prefix-cache hits
    come in (one group: its block size; several: the least common multiple of theirs, `groups`
    naming them). Shared by the vLLM page (from a server's events) and the planner (modelled)."""
    return (f"vLLM reuses whole blocks of {hit_block:,} tokens {where}{groups}, from block 0: a shared prefix "
            f"shorter than {hit_block:,} tokens never hits {where}, and a longer one reuses at most "
            f"⌊prefix / {hit_block:,}⌋ × {hit_block:,} of its tokens")
