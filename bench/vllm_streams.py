"""KV-event streams built to measure and test kvviz's per-request accounting (bench/vllm_replay.py,
tests/vllm): never shipped as data.

`busy_server` models a vLLM engine under load: a few shared system prompts, multi-turn sessions
that resend their history, an LRU pool that evicts, reuse reports (`kv_cache_report_mode=full`)
and generated blocks stored step by step, with vLLM 0.32's event shapes. `shared_parent` is the
crafted file of issue 41: `n` blocks stored after one parent, each a request that shares all but
its last tokens with the one before. Both are deterministic (a seeded generator).
"""
from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterator

from kvviz.vllm.events import BlockRemoved, BlockStored, KVEventBatch
from kvviz.vllm.trace import BatchRecord, Recording

URL = "http://127.0.0.1:8000"
BLOCK = 16


def stored(hashes: list, parent, tokens: list[int], size: int = BLOCK, session: str | None = None) -> BlockStored:
    return BlockStored(block_hashes=hashes, parent_block_hash=parent, token_ids=tokens, block_size=size,
                       lora_id=None, medium="GPU", lora_name=None, session_id=session)


def shared_parent(n: int, per_batch: int = 50, size: int = 8) -> Recording:
    """`n` BlockStored events of one block each after the same (never stored) parent."""
    recording = Recording({"kind": "vllm watch", "urls": [URL]})
    parent = 999_999_999
    for seq, first in enumerate(range(0, n, per_batch)):
        events = [stored([10_000 + j], parent, [1] * (size - 2) + [j // 1000, j % 1000], size)
                  for j in range(first, min(n, first + per_batch))]
        recording.batches.append(BatchRecord(seq * 0.001, URL, 0, seq, KVEventBatch(1000.0 + seq * 0.001, events, 0)))
    return recording


class BusyServer:
    """One engine's prefix cache under a steady load; `batches()` yields its event batches."""

    def __init__(self, pool_blocks: int = 4096, prompts: int = 4, seed: int = 0):
        self.rng = random.Random(seed)
        self.pool: OrderedDict = OrderedDict()  # hash -> None, least recently used first
        self.pool_blocks = pool_blocks
        self.systems = [[self.rng.randrange(50_000) for _ in range(8 * BLOCK)] for _ in range(prompts)]
        self.sessions: dict[str, list[int]] = {}
        self.ts = 1_000.0

    def hashes(self, tokens: list[int]) -> list[int]:
        out, parent = [], 0
        for i in range(len(tokens) // BLOCK):
            parent = hash((parent, tuple(tokens[i * BLOCK:(i + 1) * BLOCK]))) & (2**63 - 1)
            out.append(parent)
        return out

    def request(self) -> list[list]:
        """The event batches of one request: its prompt step, then its generated blocks."""
        sid = f"s{self.rng.randrange(2_000)}"
        history = self.sessions.get(sid) or list(self.rng.choice(self.systems))
        prompt = history + [self.rng.randrange(50_000) for _ in range(self.rng.randrange(8, 6 * BLOCK))]
        hashes = self.hashes(prompt)
        hit = 0
        while hit < len(hashes) and hashes[hit] in self.pool and (hit + 1) * BLOCK < len(prompt):
            hit += 1
        first: list = [stored(hashes[:hit], None, prompt[:hit * BLOCK], session=sid)] if hit else []
        for h in hashes[:hit]:
            self.pool.move_to_end(h)
        first += self.make_room(len(hashes) - hit)
        if hit < len(hashes):
            first.append(stored(hashes[hit:], hashes[hit - 1] if hit else None,
                                prompt[hit * BLOCK:len(hashes) * BLOCK], session=sid))
        self.cache(hashes[hit:])
        answer = [self.rng.randrange(50_000) for _ in range(self.rng.randrange(BLOCK, 4 * BLOCK))]
        full = prompt + answer
        new = self.hashes(full)
        steps = [first]
        for i in range(len(hashes), len(new)):
            steps.append(self.make_room(1) + [stored([new[i]], new[i - 1] if i else None,
                                                     full[i * BLOCK:(i + 1) * BLOCK], session=sid)])
            self.cache(new[i:i + 1])
        self.sessions[sid] = full if len(full) < 60 * BLOCK else list(self.rng.choice(self.systems))
        return [s for s in steps if s]

    def cache(self, hashes: list[int]) -> None:
        for h in hashes:
            self.pool[h] = None
            self.pool.move_to_end(h)

    def make_room(self, blocks: int) -> list:
        evicted = []
        while self.pool and len(self.pool) + blocks > self.pool_blocks:
            evicted.append(self.pool.popitem(last=False)[0])
        return [BlockRemoved(block_hashes=evicted, medium="GPU")] if evicted else []

    def batches(self, events: int) -> Iterator[KVEventBatch]:
        """Batches until `events` events were yielded (the last batch may pass it)."""
        seq = 0
        while seq < events:
            for step in self.request():
                self.ts += 0.01
                seq += len(step)
                yield KVEventBatch(self.ts, step, 0)


def busy_server(events: int, pool_blocks: int = 4096, seed: int = 0) -> Iterator[KVEventBatch]:
    return BusyServer(pool_blocks, seed=seed).batches(events)
