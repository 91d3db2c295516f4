"""Why a request's prompt stopped matching the prefix cache, in words, from the block log.

The first block a request had to compute (`Miss`) is compared with what the cache held or had
held, in this order:

1. its very hash was cached before and evicted (LRU, under pool pressure) or cleared: `evicted`,
   `cleared` (when, how long before, how full the pool was then);
2. its hash is cached right now, yet it was computed again: `recomputed` (a request running in
   the same step was computing it, or it holds the prompt's last token, which vLLM recomputes; on
   a hybrid model, the state its Mamba / linear-attention layers need there was not kept);
3. a block after the same prefix holds the very same tokens under another hash: `extra keys`
   (a different LoRA, cache salt or multimodal input, which vLLM hashes with the tokens);
4. a block after the same prefix shares its first tokens: `diverged` at token k, from the request
   that stored that block, naming the token ids that differ there. For a first block (every chat
   prompt shares its template's first few tokens) it takes at least a quarter block in common, or
   an edit: after the first difference the rest of the block lines up again (`realigned`), as
   when one word of a system prompt was changed;
5. otherwise `extends` (some prefix was cached, this continuation never seen) or `first seen`.

Steps 3 and 4 ask the block log's sibling index (`kvviz.vllm.siblings`), never a scan of the
siblings: explaining a miss costs one block's tokens, however many requests shared the prefix.
On a tie the latest block wins.

A request whose whole blocks all came from the cache gets `partial tail`: only its last, partial
block was computed, and vLLM caches whole blocks only.
"""
from __future__ import annotations

from dataclasses import dataclass

from kvviz.vllm.blocklog import CLEARED, BlockLog, Life
from kvviz.vllm.events import BlockHash

FIRST_SEEN, EXTENDS, DIVERGED = "first seen", "extends", "diverged"
EVICTED, CLEARED_CODE, RECOMPUTED = "evicted", "cleared", "recomputed"
EXTRA_KEYS, PARTIAL_TAIL = "extra keys", "partial tail"
NO_EVENT = "no event"  # a request only the client's request log names (kvviz.vllm.replies)
CODES = (FIRST_SEEN, EXTENDS, DIVERGED, EVICTED, CLEARED_CODE, RECOMPUTED, EXTRA_KEYS, PARTIAL_TAIL, NO_EVENT)


@dataclass(frozen=True, kw_only=True)
class Miss:
    """The first block a request stored: where its cache match stopped."""

    block_hash: BlockHash
    parent: BlockHash | None
    position: int  # block index: the request reused `position` blocks
    tokens: tuple[int, ...]
    keys: tuple
    block_size: int
    ts: float
    t0: float  # the ledger's first batch time, for "at t = … s"


def tail(block_size: int) -> tuple[str, str]:
    return PARTIAL_TAIL, (f"every whole block of the prompt came from the cache; its last tokens "
                          f"do not fill a block of {block_size} and vLLM caches whole blocks only")


def explain(log: BlockLog, miss: Miss, usable: int | None = None, state_kept: bool = True) -> tuple[str, str, int]:
    """(code, sentence, first token not served from the cache). `state_kept` False: a hybrid's
    state groups stored their state at this block in this step (they had not kept it)."""
    start = miss.position * miss.block_size
    gone = log.last_end.get(miss.block_hash)
    if not log.is_cached(miss.block_hash) and gone is not None:
        return gone_reason(gone, miss, usable) + (start,)
    current = log.live.get(miss.block_hash)
    if current is not None and not state_kept:
        return RECOMPUTED, (f"block {miss.position} was already cached (stored by request {current.owner}) "
                            "but computed again: the model's state (Mamba / linear attention) was not "
                            "kept at it, and a hybrid's hit needs both"), start
    if current is not None:
        return RECOMPUTED, (f"block {miss.position} was already cached (stored by request "
                            f"{current.owner}) but computed again: that request was computing it in "
                            "the same step, or it holds the prompt's last token, which vLLM always "
                            "recomputes"), start
    same = log.siblings.same_tokens(miss.parent, miss.tokens)
    if same is not None:
        return EXTRA_KEYS, (f"block {miss.position} has the same tokens as a block of request "
                            f"{same.owner} but another hash: a different LoRA, cache salt or "
                            f"multimodal input ({keys_text(same.keys)} then, "
                            f"{keys_text(miss.keys)} now)"), start
    best, common = log.siblings.closest(miss.parent, miss.tokens)
    if best is not None and (miss.position > 0 or common >= max(1, miss.block_size // 4)
                             or (common > 0 and realigned(best.tokens, miss.tokens, common))):
        k = start + common
        return DIVERGED, diverged_text(k, best, miss.tokens, common), k
    if miss.position > 0:
        owner = log.known(miss.parent)
        return EXTENDS, (f"the first {start} tokens were cached (request "
                         f"{owner.owner if owner else 'before kvviz attached'}); what follows was "
                         "seen for the first time"), start
    return FIRST_SEEN, "first time this prefix was seen", 0


def diverged_text(k: int, best: Life, tokens: tuple, common: int) -> str:
    """Where the prompt left the cached one, the token ids there, and which request cached it."""
    here = tokens[common] if common < len(tokens) else None
    there = best.tokens[common] if common < len(best.tokens) else None
    ids = f": token id {here} here, {there} in request {best.owner}'s prompt" if None not in (here, there) else ""
    return f"diverged at token {k} from the prefix request {best.owner} cached{ids}"


MAX_SHIFT = 4  # tokens an edit may add or drop (a word changed, inserted or deleted)


def realigned(cached: tuple, tokens: tuple, common: int) -> bool:
    """True when, after the first `common` shared tokens, the two blocks line up again: for some
    shift of at most MAX_SHIFT tokens, at least half of the remaining positions hold the same
    token. An edit, not another prompt (two prompts that share only a chat template's first
    tokens have nothing in common after it)."""
    rest = len(tokens) - common - 1
    if rest < 2:
        return False
    for shift in range(-MAX_SHIFT, MAX_SHIFT + 1):
        same = sum(1 for j in range(common + 1, len(tokens))
                   if 0 <= j + shift < len(cached) and cached[j + shift] == tokens[j])
        if 2 * same >= rest:
            return True
    return False


def gone_reason(gone: Life, miss: Miss, usable: int | None) -> tuple[str, str]:
    at, ago = gone.ended_s - miss.t0, miss.ts - gone.ended_s
    if gone.ended_by == CLEARED:
        return CLEARED_CODE, (f"block {miss.position} was cached until the prefix cache was cleared "
                              f"at t = {at:.1f} s ({ago:.1f} s before)")
    pool = f"{gone.cached_then} of {usable}" if usable else f"{gone.cached_then}"
    return EVICTED, (f"block {miss.position} (stored by request {gone.owner}) was evicted at "
                     f"t = {at:.1f} s ({ago:.1f} s before) by pool pressure, with {pool} blocks "
                     "cached then")


def keys_text(keys: tuple) -> str:
    lora_id, lora_name, extra = keys
    parts = [f"LoRA {lora_name or lora_id}" if lora_id is not None or lora_name else "no LoRA",
             f"extra keys {list(extra)}" if extra else "no extra keys"]
    return ", ".join(parts)
