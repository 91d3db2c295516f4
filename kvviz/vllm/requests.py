"""Per-request cache accounting from one engine's KV events: what each request reused, stored, and
why the rest missed.

vLLM 0.32 publishes, per request, a `BlockStored` for the blocks it reused from the prefix cache
(requests sent with `kv_cache_report_mode="full"`: the contiguous run from block 0, parent None,
every hash already cached) and `BlockStored` for the blocks it newly cached, in the same engine
step for the prompt (vLLM caches a prompt's full blocks when it allocates them), later ones one by
one as generated tokens fill them. Each carries the request's `session_id` when the client sent
one. Events are grouped into requests:

- a reuse report, or a store whose parent is None, starts a request (per session, when tagged);
- any other store continues the request whose chain ends at its parent (same session when
  tagged); a store continuing no known request starts one whose reuse is inferred from the chain;
- a hybrid model's state groups (`kvviz.vllm.pool.StateGroups`) publish the same requests again
  with the same hashes: their events only say where a state was kept, and a store from block 0 of
  cached attention blocks next to a state newly stored at one of them (the same step) is the
  request computing them again (its state was not kept), not a hit.

Per request: `cached_tokens` = reused blocks × block size (vLLM's own
`usage.prompt_tokens_details.cached_tokens`), `prompt_tokens` = the prompt's tokens in whole blocks
(reused plus those stored in the request's first step; a partial last block is never in an event),
and the miss reason (`kvviz.vllm.reasons`). Rows are bounded (MAX_REQUESTS, oldest dropped).

Each event costs time proportional to its own blocks, never to the requests or blocks seen
before (a busy server's thousands of requests under one system prompt, or a crafted file): the
request a store continues is looked up by (session, chain end), the requests waiting for their
first store are keyed by number, and the reasons come from the block log's indexes.
"""
from __future__ import annotations

import copy
from collections import Counter, deque
from dataclasses import dataclass, field, replace

from kvviz.vllm import reasons
from kvviz.vllm.blocklog import BlockLog
from kvviz.vllm.events import AllBlocksCleared, BlockHash, BlockRemoved, BlockStored, KVEventBatch
from kvviz.vllm.pool import StateGroups

MAX_REQUESTS = 5000
MATCH_WINDOW = 512  # a store continues only one of the latest requests started
EVENTS, INFERRED = "events", "inferred from the chain"


@dataclass(kw_only=True)
class Request:
    name: str  # the session_id (with #n from its second request on), else "#n" in arrival order
    session_id: str | None
    first_s: float  # server time of its first event
    batch_no: int  # the ledger's batch counter when it started
    block_size: int
    tail: BlockHash | None = None  # the last block of its chain so far
    reused_blocks: int = 0
    reuse_source: str = EVENTS
    prefill_blocks: int = 0  # stored in its first step: the rest of the prompt's whole blocks
    stored_blocks: int = 0  # prompt and generated blocks newly cached
    reason: str = ""  # a code of kvviz.vllm.reasons
    miss_reason: str = ""  # in words
    first_miss_token: int | None = None
    number: int = 0  # the ledger's count of requests started, this one included

    @property
    def cached_tokens(self) -> int:
        return self.reused_blocks * self.block_size

    @property
    def prompt_tokens(self) -> int:
        return (self.reused_blocks + self.prefill_blocks) * self.block_size

    def row(self, t0: float) -> dict:
        return {"request": self.name, "session_id": self.session_id, "t_s": round(self.first_s - t0, 3),
                "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "reused_blocks": self.reused_blocks, "stored_blocks": self.stored_blocks,
                "reason": self.reason, "miss_reason": self.miss_reason,
                "first_miss_token": self.first_miss_token, "reuse_source": self.reuse_source}


@dataclass(kw_only=True)
class RequestLedger:
    log: BlockLog = field(default_factory=BlockLog)
    requests: deque[Request] = field(default_factory=lambda: deque(maxlen=MAX_REQUESTS))
    t0: float | None = None
    batch_no: int = 0
    numbered: int = 0
    sessions: dict[str, int] = field(default_factory=dict)  # session_id -> requests seen
    pending: dict[int, Request] = field(default_factory=dict)  # reuse seen this step, no store yet
    usable_blocks: int | None = None  # from /metrics when known: "N of U blocks cached"
    started: int = 0  # requests started so far
    ends: ChainEnds = field(default_factory=lambda: ChainEnds())  # (session, chain end) -> requests
    states: StateGroups = field(default_factory=StateGroups)  # a hybrid's state groups
    fresh_states: set = field(default_factory=set)  # hashes a state group newly stored this step

    def apply(self, batch: KVEventBatch) -> None:
        """One batch (one engine step), in sequence order."""
        if self.t0 is None:
            self.t0 = batch.ts
        self.batch_no += 1
        for event in batch.events:
            if isinstance(event, (BlockStored, BlockRemoved)) and self.states.is_state(event):
                self.state_event(event)
            elif isinstance(event, BlockStored):
                self.stored(event, batch.ts)
            elif isinstance(event, BlockRemoved):
                for block_hash in event.block_hashes:
                    self.log.remove(block_hash, batch.ts)
            elif isinstance(event, AllBlocksCleared):
                self.log.clear(batch.ts)
                self.states.clear()
        self.fresh_states.clear()
        for request in self.pending.values():  # every whole block of its prompt came from the cache
            request.reason, request.miss_reason = reasons.tail(request.block_size)
            request.first_miss_token = request.prompt_tokens
        self.pending.clear()

    def __deepcopy__(self, memo) -> RequestLedger:
        """A copy to draw from, cheap enough for every page refresh: ended lives never change
        again, so they are shared; current lives and requests are copied. The copy has no
        indexes (`log.siblings`, `ends`): draw from it, never feed it events."""
        log = self.log
        drawn = BlockLog(live={h: replace(life, uses_s=list(life.uses_s)) for h, life in log.live.items()},
                         copies=Counter(log.copies), ended=deque(log.ended), last_end=dict(log.last_end),
                         restored_after_s=deque(log.restored_after_s, maxlen=log.restored_after_s.maxlen),
                         num_cached=log.num_cached)
        return RequestLedger(log=drawn, requests=deque((copy.copy(r) for r in self.requests), maxlen=MAX_REQUESTS),
                             t0=self.t0, batch_no=self.batch_no, numbered=self.numbered, sessions=dict(self.sessions),
                             pending={}, usable_blocks=self.usable_blocks, started=self.started)

    def state_event(self, event: BlockStored | BlockRemoved) -> None:
        if isinstance(event, BlockRemoved):
            self.states.remove(event)
        elif not self.states.reported(event):
            self.states.store(event)
            self.fresh_states.update(event.block_hashes)

    def rows(self) -> list[dict]:
        return [r.row(self.t0 or 0.0) for r in self.requests]

    # --- grouping ---------------------------------------------------------------------------------
    def stored(self, event: BlockStored, ts: float) -> None:
        if not event.block_hashes:
            return
        if is_reuse(event, self.log) and not self.fresh_states.intersection(event.block_hashes):
            request = self.start(event, ts)
            request.reused_blocks = len(event.block_hashes)
            self.set_tail(request, event.block_hashes[-1])
            for block_hash in event.block_hashes:
                self.log.use(block_hash, ts)
            self.pending[request.number] = request
            return
        request = self.continued(event)
        if request is None:
            request = self.start(event, ts)
            self.infer_reuse(request, event.parent_block_hash)
            self.explain(request, event, ts)
        elif self.pending.pop(request.number, None) is not None:
            self.explain(request, event, ts)
        self.store_blocks(request, event, ts)

    def start(self, event: BlockStored, ts: float) -> Request:
        sid = event.session_id
        if sid is not None:
            self.sessions[sid] = self.sessions.get(sid, 0) + 1
            name = sid if self.sessions[sid] == 1 else f"{sid}#{self.sessions[sid]}"
        else:
            self.numbered += 1
            name = f"#{self.numbered}"
        self.started += 1
        request = Request(name=name, session_id=sid, first_s=ts, batch_no=self.batch_no, block_size=event.block_size,
                          number=self.started)
        self.requests.append(request)  # the deque drops the oldest past MAX_REQUESTS
        return request

    def continued(self, event: BlockStored) -> Request | None:
        """The request (same session, among the latest MATCH_WINDOW started) whose chain ends
        where this store starts; the one that got there last."""
        if event.parent_block_hash is None:
            return None
        return self.ends.find(event.session_id, event.parent_block_hash, self.started - MATCH_WINDOW)

    def set_tail(self, request: Request, block_hash: BlockHash) -> None:
        request.tail = block_hash
        self.ends.add(request, self.requests, self.started - MATCH_WINDOW)

    def infer_reuse(self, request: Request, parent: BlockHash | None) -> None:
        """A request that starts mid-chain reused the blocks up to its parent (no reuse report)."""
        known = self.log.known(parent) if parent is not None else None
        if known is not None:
            request.reused_blocks, request.reuse_source = known.position + 1, INFERRED

    def store_blocks(self, request: Request, event: BlockStored, ts: float) -> None:
        size, parent = event.block_size, event.parent_block_hash
        position = request.reused_blocks + request.stored_blocks if parent is not None else 0
        for i, block_hash in enumerate(event.block_hashes):
            tokens = tuple(event.token_ids[i * size:(i + 1) * size])
            self.log.store(block_hash, parent, position + i, tokens, block_keys(event, i), request.name, ts)
            parent = block_hash
        request.stored_blocks += len(event.block_hashes)
        self.set_tail(request, event.block_hashes[-1])
        if request.batch_no == self.batch_no:
            request.prefill_blocks += len(event.block_hashes)

    def explain(self, request: Request, event: BlockStored, ts: float) -> None:
        """Why the request's first stored block was not in the cache (the log as it was then)."""
        size = event.block_size
        miss = reasons.Miss(block_hash=event.block_hashes[0], parent=event.parent_block_hash,
                            position=request.reused_blocks, tokens=tuple(event.token_ids[:size]),
                            keys=block_keys(event, 0), block_size=size, ts=ts, t0=self.t0 or ts)
        request.reason, request.miss_reason, request.first_miss_token = reasons.explain(
            self.log, miss, self.usable_blocks, state_kept=miss.block_hash not in self.fresh_states)


def is_reuse(event: BlockStored, log: BlockLog) -> bool:
    """vLLM's report of prefix-cache hits: from block 0, every block already cached."""
    return event.parent_block_hash is None and all(log.is_cached(h) for h in event.block_hashes)


def block_keys(event: BlockStored, i: int) -> tuple:
    """What besides tokens and parent enters block i's hash, as far as the event tells."""
    extra = event.extra_keys[i] if event.extra_keys and i < len(event.extra_keys) else None
    return (event.lora_id, event.lora_name, tuple(extra) if extra else None)


@dataclass
class ChainEnds:
    """(session_id, last block of its chain) -> the requests whose chain ended there, in the order
    they got there. A request that moved on, or left the window, is skipped when met at a list's
    end; the index is rebuilt from the window's requests every MATCH_WINDOW additions, so it
    never holds much more than the window (amortized constant time per addition)."""

    lists: dict[tuple, list[Request]] = field(default_factory=dict)
    num_added: int = 0

    def add(self, request: Request, requests, oldest: int) -> None:
        self.lists.setdefault((request.session_id, request.tail), []).append(request)
        self.num_added += 1
        if self.num_added > 2 * MATCH_WINDOW:
            self.rebuild(requests, oldest)

    def find(self, session_id: str | None, block_hash: BlockHash, oldest: int) -> Request | None:
        key = (session_id, block_hash)
        found = self.lists.get(key)
        while found and (found[-1].tail != block_hash or found[-1].number <= oldest):
            found.pop()
        if found is not None and not found:
            del self.lists[key]
        return found[-1] if found else None

    def rebuild(self, requests, oldest: int) -> None:
        """Only the requests still in the window, by their start."""
        self.lists, self.num_added = {}, 0
        recent = [r for _, r in zip(range(MATCH_WINDOW), reversed(requests))]
        for request in reversed(recent):
            if request.number > oldest and request.tail is not None:
                self.lists.setdefault((request.session_id, request.tail), []).append(request)
                self.num_added += 1
