"""'Would this prompt hit now?': a prompt's token ids walked block by block down the prefix tree the
events rebuilt (`CachedBlocks`). Pure.

The walk follows vLLM's rule: whole blocks only, from block 0, each a cached child of the block
before with the very same tokens, and never the block of the prompt's last token (vLLM computes
that token again to get its logits: at most (prompt_tokens - 1) // block_size blocks hit). It
compares tokens, not vLLM's hashes, so a LoRA, cache salt or image that changes the hash is not
seen here: the answer is what the cached tokens allow (derived from events). On a hybrid model the
hit then ends at the last matched block where every state group kept its state (`CachedBlocks.
states.kept`; vLLM's `MambaManager.find_longest_cache_hit`): fewer blocks than the attention match.
"""
from __future__ import annotations

from dataclasses import dataclass

from kvviz.vllm.pool import CachedBlocks
from kvviz.vllm.siblings import common_start


@dataclass(frozen=True)
class HitCheck:
    prompt_tokens: int
    block_size: int
    cached_blocks: int  # whole blocks the prompt would reuse
    closest_common: int  # tokens the next cached block shares with the prompt's next block (0: none)
    attention_blocks: int | None = None  # blocks the tree matched, when no state was kept at its end

    @property
    def cached_tokens(self) -> int:
        return self.cached_blocks * self.block_size

    def sentence(self) -> str:
        """What the check found, in words."""
        n, size = self.prompt_tokens, self.block_size
        head = (f"{self.cached_tokens} of {n} prompt tokens would come from the cache now "
                f"({self.cached_blocks} whole block{'s' if self.cached_blocks != 1 else ''} of {size})")
        if self.attention_blocks is not None:
            kept = f"the last it kept ends at token {self.cached_tokens}" if self.cached_blocks else "nor before"
            return head + (f"; the cached blocks match {self.attention_blocks * size} tokens, but the model's "
                           f"state (Mamba / linear attention) was not kept there ({kept}): a hybrid's hit "
                           "needs both.")
        if self.cached_blocks == max(0, (n - 1) // size):
            return head + ": every whole block it can reuse is cached; the rest is its last block, always computed."
        if self.closest_common:
            return head + (f"; the match stops at token {self.cached_tokens}: the closest cached block after it "
                           f"shares {self.closest_common} tokens, then differs at token "
                           f"{self.cached_tokens + self.closest_common}.")
        return head + f"; the match stops at token {self.cached_tokens}: no cached block continues it."


def check(pool: CachedBlocks, ids: list[int], block_size: int) -> HitCheck:
    """Walk `ids` through the cached tree."""
    kids = pool.children()
    usable = max(0, (len(ids) - 1) // block_size)
    node, path = None, []
    while len(path) < usable:
        matched = len(path)
        block = tuple(ids[matched * block_size:(matched + 1) * block_size])
        found = next((h for h in candidates(pool, kids, node) if pool.blocks[h].token_ids == block), None)
        if found is None:
            break
        node = found
        path.append(found)
    matched = len(path)
    nxt = tuple(ids[matched * block_size:(matched + 1) * block_size])
    closest = max((common_start(pool.blocks[h].token_ids, nxt) for h in candidates(pool, kids, node)),
                  default=0) if matched < usable else 0
    kept = next((k for k in range(matched, 0, -1) if pool.states.kept(path[k - 1])), 0)
    if kept < matched:
        return HitCheck(len(ids), block_size, kept, 0, attention_blocks=matched)
    return HitCheck(len(ids), block_size, matched, closest)


def candidates(pool: CachedBlocks, kids: dict, node) -> list:
    """Cached blocks that follow `node` (None: blocks that start a sequence, not orphans whose
    parent was evicted)."""
    if node is None:
        return [h for h in kids.get(None, []) if pool.blocks[h].parent is None]
    return kids.get(node, [])
