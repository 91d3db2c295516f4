"""Every block an engine's KV events ever named, with its life: stored, reused, evicted.

The pool (`kvviz.vllm.pool`) keeps what is cached now; this log keeps what was, so that a request
can be told why it missed (the block it needed was evicted at t, a sibling block with the same
tokens had another hash, ...) and block residency can be measured (how long a block lived, how
often it was reused, how long it idled before eviction). Times are the server's batch times
(epoch seconds). One `Life` per time a hash was cached; a hash stored again after its eviction
starts a new life. Pure data, bounded: at most MAX_LIVES ended lives are kept. Every method
costs time proportional to its own arguments, never to the blocks seen so far: counts are kept
as they change, and the siblings after each prefix are indexed (`kvviz.vllm.siblings`).
"""
from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from kvviz.vllm.events import BlockHash
from kvviz.vllm.siblings import SiblingIndex

MAX_LIVES = 20_000  # ended lives kept for the histograms (the oldest are dropped first)
EVICTED, CLEARED = "evicted", "cleared"


@dataclass(kw_only=True)
class Life:
    """One stay of a block hash in the cache."""

    block_hash: BlockHash
    parent: BlockHash | None
    position: int  # block index in its sequence (0: the first block)
    tokens: tuple[int, ...]
    keys: tuple  # (lora_id, lora_name, extra_keys): what besides the tokens goes into the hash
    owner: str  # the request that stored it
    stored_s: float
    uses_s: list[float] = field(default_factory=list)  # reported reuses (prefix hits)
    ended_s: float | None = None
    ended_by: str | None = None  # EVICTED or CLEARED
    cached_then: int = 0  # blocks cached (events) just before it was evicted

    @property
    def last_use_s(self) -> float:
        return self.uses_s[-1] if self.uses_s else self.stored_s


@dataclass(kw_only=True)
class BlockLog:
    live: dict[BlockHash, Life] = field(default_factory=dict)  # cached now (the first copy's life)
    copies: Counter = field(default_factory=Counter)
    ended: deque[Life] = field(default_factory=deque)  # oldest first, at most MAX_LIVES
    last_end: dict[BlockHash, Life] = field(default_factory=dict)  # hash -> its latest ended life
    siblings: SiblingIndex = field(default_factory=SiblingIndex)  # by parent: live and kept lives
    restored_after_s: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_LIVES))
    num_cached: int = 0  # sum(copies.values()), kept as it changes

    def is_cached(self, block_hash: BlockHash) -> bool:
        return self.copies[block_hash] > 0

    def store(self, block_hash, parent, position: int, tokens: tuple, keys: tuple, owner: str,
              ts: float) -> None:
        if self.copies[block_hash] == 0:
            before = self.last_end.get(block_hash)
            if before is not None and before.ended_by == EVICTED:
                self.restored_after_s.append(ts - before.ended_s)
            life = Life(block_hash=block_hash, parent=parent, position=position, tokens=tokens, keys=keys,
                        owner=owner, stored_s=ts)
            self.live[block_hash] = life
            self.siblings.add(life)
        self.copies[block_hash] += 1
        self.num_cached += 1

    def use(self, block_hash, ts: float) -> None:
        life = self.live.get(block_hash)
        if life is not None:
            life.uses_s.append(ts)

    def remove(self, block_hash, ts: float, how: str = EVICTED) -> None:
        if self.copies[block_hash] <= 0:
            self.copies.pop(block_hash, None)  # stored before kvviz attached
            return
        cached = self.num_cached
        self.copies[block_hash] -= 1
        self.num_cached -= 1
        if self.copies[block_hash] == 0:
            self.copies.pop(block_hash, None)
            self.end(self.live.pop(block_hash), ts, how, cached)

    def clear(self, ts: float) -> None:
        cached = self.num_cached
        for life in list(self.live.values()):
            self.end(life, ts, CLEARED, cached)
        self.live.clear()
        self.copies.clear()
        self.num_cached = 0

    def end(self, life: Life, ts: float, how: str, cached_then: int) -> None:
        life.ended_s, life.ended_by, life.cached_then = ts, how, cached_then
        self.last_end[life.block_hash] = life
        self.ended.append(life)
        if len(self.ended) > MAX_LIVES:
            dropped = self.ended.popleft()
            if self.last_end.get(dropped.block_hash) is dropped:
                del self.last_end[dropped.block_hash]
            self.siblings.drop(dropped)

    def known(self, block_hash) -> Life | None:
        """The block's current life, else its latest ended one."""
        return self.live.get(block_hash) or self.last_end.get(block_hash)
