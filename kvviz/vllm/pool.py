"""One engine's prefix cache rebuilt from its KV events: which blocks are cached, and their tree.

vLLM names a full block by a hash chained over its tokens and its parent block's hash, so the
events' `(parent_block_hash, block_hashes)` edges form a forest: each root-to-leaf path is one
token sequence (a prompt and what was generated), and a node with several children is a prefix
that several sequences share. `CachedBlocks` applies events in sequence order and keeps counts:

- a hash is counted once per physical block holding it (vLLM may briefly keep two copies);
- a `BlockStored` whose blocks are all cached already, starting from a root, is vLLM reporting a
  prefix-cache hit (requests sent with `kv_cache_report_mode="full"`), not new memory;
- a sequence number lower than the last one seen means the server restarted: state is reset;
- a hybrid model's state groups (`kv_cache_spec_kind` "mamba": Mamba, Gated DeltaNet, short
  convolutions) store the same hashes as its attention group, but in "align" mode only the state
  at some block boundaries is kept: their `BlockStored` lists just those hashes while its
  `token_ids` span every block (null blocks skipped), so its tokens cannot be placed. Such a group's
  hashes are kept per group (`StateGroups`), and only events whose hashes and tokens line up build
  the tree. A prefix hit on a hybrid needs the attention blocks AND each state group's state at the
  hit's last block (vLLM's `MambaManager.find_longest_cache_hit`).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kvviz.vllm.events import AllBlocksCleared, BlockHash, BlockRemoved, BlockStored, KVEventBatch


@dataclass
class Block:
    """A cached block: its parent in the prefix tree and the tokens it holds."""

    parent: BlockHash | None
    token_ids: tuple[int, ...]
    stored_s: float  # server time of the batch that stored it
    depth: int  # 0 for a block that starts a sequence


@dataclass(kw_only=True)
class PoolCounts:
    """Cumulative counts since the reader attached (events, never the server's own counters)."""

    num_stored: int = 0  # blocks newly cached
    num_removed: int = 0  # blocks evicted
    num_cleared: int = 0  # AllBlocksCleared events
    num_reused: int = 0  # blocks reported reused (prefix hits, report mode "full")
    reused_tokens: int = 0
    num_batches: int = 0
    num_restarts: int = 0  # sequence numbers went back: the server restarted


@dataclass
class StateGroups:
    """A hybrid model's state cache groups (events of `kv_cache_spec_kind` "mamba") and the block
    hashes at which each keeps its state. A state group's reuse report lists every block up to the
    hit (its state is kept at the last one only), and its new stores repeat hashes the attention
    group already holds: so its events are judged by its own hashes."""

    held: dict[int, Counter] = field(default_factory=dict)  # group -> hash -> copies

    def is_state(self, event: BlockStored | BlockRemoved) -> bool:
        group = event.group_idx or 0
        if isinstance(event, BlockStored) and event.kv_cache_spec_kind == "mamba":
            self.held.setdefault(group, Counter())
        return group in self.held

    def reported(self, event: BlockStored) -> bool:
        """A reuse report: from block 0, ending where this group already keeps a state."""
        hashes = event.block_hashes
        return event.parent_block_hash is None and bool(hashes) and hashes[-1] in self.held[event.group_idx or 0]

    def store(self, event: BlockStored) -> None:
        self.held[event.group_idx or 0].update(event.block_hashes)

    def remove(self, event: BlockRemoved) -> None:
        held = self.held[event.group_idx or 0]
        for block_hash in event.block_hashes:
            held[block_hash] -= 1
            if held[block_hash] <= 0:
                del held[block_hash]

    def clear(self) -> None:
        for held in self.held.values():
            held.clear()

    def kept(self, block_hash: BlockHash) -> bool:
        """Every state group keeps its state at this block (True without state groups)."""
        return all(block_hash in held for held in self.held.values())


@dataclass(kw_only=True)
class CachedBlocks:
    """The cached blocks of one engine (one DP rank), as its events describe them."""

    blocks: dict[BlockHash, Block] = field(default_factory=dict)
    copies: Counter = field(default_factory=Counter)  # hash -> physical blocks holding it
    counts: PoolCounts = field(default_factory=PoolCounts)
    last_seq: int | None = None
    last_ts: float = 0.0  # server time of the last batch applied
    block_size: int | None = None
    num_cached_blocks: int = 0  # physical blocks holding a cached prefix: sum(copies.values())
    group_block_sizes: dict[int, int] = field(default_factory=dict)  # cache group -> its block size (events)
    states: StateGroups = field(default_factory=StateGroups)  # a hybrid's state groups

    def apply(self, seq: int, batch: KVEventBatch) -> None:
        """Apply one batch in sequence order. A batch numbered at or below the last one is a
        duplicate (replay overlapping the live stream) unless it is newer on the server's clock:
        then the server restarted (its numbers start again at 0) and the state starts over."""
        if self.last_seq is not None and seq <= self.last_seq:
            if batch.ts <= self.last_ts:
                return
            self.restart()
        self.last_seq, self.last_ts = seq, batch.ts
        self.counts.num_batches += 1
        for event in batch.events:
            self.apply_event(event, batch.ts)

    def restart(self) -> None:
        restarts = self.counts.num_restarts + 1
        self.blocks.clear()
        self.copies.clear()
        self.num_cached_blocks = 0
        self.counts = PoolCounts(num_restarts=restarts)
        self.last_seq = None

    def apply_event(self, event, ts: float) -> None:
        if isinstance(event, BlockStored):
            self.store(event, ts)
        elif isinstance(event, BlockRemoved):
            self.remove(event.block_hashes)
            if self.states.is_state(event):
                self.states.remove(event)
        elif isinstance(event, AllBlocksCleared):
            self.blocks.clear()
            self.copies.clear()
            self.num_cached_blocks = 0
            self.counts.num_cleared += 1
            self.states.clear()

    def store(self, event: BlockStored, ts: float) -> None:
        self.block_size = event.block_size
        self.group_block_sizes[event.group_idx or 0] = event.block_size
        state = self.states.is_state(event)
        if state and self.states.reported(event) or not state and self.reported_reuse(event):
            self.counts.num_reused += len(event.block_hashes)
            self.counts.reused_tokens += len(event.token_ids)
            return
        if state:
            self.states.store(event)
        parent = event.parent_block_hash
        depth = self.blocks[parent].depth + 1 if parent in self.blocks else 0
        size = event.block_size
        placed = len(event.token_ids) == size * len(event.block_hashes)  # else null blocks were skipped
        for i, block_hash in enumerate(event.block_hashes):
            if placed:
                tokens = tuple(event.token_ids[i * size:(i + 1) * size])
                self.blocks.setdefault(block_hash, Block(parent, tokens, ts, depth + i))
            self.copies[block_hash] += 1
            parent = block_hash
        self.num_cached_blocks += len(event.block_hashes)
        self.counts.num_stored += len(event.block_hashes)

    def reported_reuse(self, event: BlockStored) -> bool:
        """A store from block 0 of blocks already cached is vLLM reporting a hit."""
        return event.parent_block_hash is None and all(h in self.copies for h in event.block_hashes)

    def remove(self, hashes: list[BlockHash]) -> None:
        for block_hash in hashes:
            if self.copies[block_hash] <= 0:
                self.copies.pop(block_hash, None)  # stored before we attached: nothing to forget
                continue
            self.copies[block_hash] -= 1
            self.num_cached_blocks -= 1
            self.counts.num_removed += 1
            if self.copies[block_hash] == 0:
                self.copies.pop(block_hash, None)
                self.blocks.pop(block_hash, None)

    def children(self) -> dict[BlockHash | None, list[BlockHash]]:
        """parent -> cached children, in storing order (None: the roots)."""
        kids: dict[BlockHash | None, list[BlockHash]] = {}
        for block_hash, block in self.blocks.items():
            parent = block.parent if block.parent in self.blocks else None
            kids.setdefault(parent, []).append(block_hash)
        return kids

    def leaves(self) -> list[BlockHash]:
        """The last cached block of every sequence still (partly) in the cache."""
        has_child = {b.parent for b in self.blocks.values()}
        return [h for h in self.blocks if h not in has_child]

    def path(self, leaf: BlockHash) -> list[BlockHash]:
        """Root-to-leaf hashes of the sequence ending at `leaf` (cut where a parent is gone)."""
        out = []
        node: BlockHash | None = leaf
        while node in self.blocks and len(out) <= len(self.blocks):
            out.append(node)
            node = self.blocks[node].parent
        return out[::-1]
