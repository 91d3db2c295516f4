"""The fleet: several vLLM replicas watched in one recording, and per request what the routing
gave up. Pure.

Per request of the client's request log (`kvviz.vllm.request_log`, which names the replica that
served it): the replica's cached tokens (vLLM's own `cached_tokens`), what every replica's prefix
cache held of its prompt at the moment it was sent (its token ids walked down each replica's
cache as the KV events had rebuilt it then, `kvviz.vllm.would_hit`: derived), the longest of
those, the locality given up (longest − served), the load each replica had (the log's requests in
flight then), and the reason in a sentence. Block names agree across replicas only when their
hashes do (same `PYTHONHASHSEED`, sha256): the walk compares tokens, so it holds either way.

Batches are applied in server time (the batch's `ts`) and requests taken at their sending time,
both epoch seconds: on one machine (or NTP-synchronised ones) the two clocks agree. A replica
whose event stream the view did not see from its first batch, or saw with a gap, marks the
requests that rest on it (`complete`).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from kvviz.vllm import would_hit
from kvviz.vllm.pool import CachedBlocks
from kvviz.vllm.trace import Recording, ReplyRecord
from kvviz.vllm.request_log import Reply
from kvviz.vllm.state import EngineState, engine_key

MAX_FLEET_REQUESTS = 500  # the newest requests analysed: each walks every replica's cache (its children
# rebuilt per walk: O(cached blocks)), so a refresh costs at most 500 × replicas × cached blocks


@dataclass(kw_only=True)
class FleetRequest:
    name: str
    replica: str  # r0, r1, ... (the recording's names)
    sent_s: float  # seconds since the first request
    prompt_tokens: int
    cached_tokens: int | None  # vLLM's own, on the replica that served it
    held: dict[str, int]  # replica -> tokens of the prompt its cache held then (derived)
    in_flight: dict[str, int]  # replica -> the log's requests in flight when it was sent
    complete: bool  # every replica's events seen from its first batch, without a gap

    @property
    def best_replica(self) -> str:
        """The replica that held the most (the serving one on a tie)."""
        return max(self.held, key=lambda r: (self.held[r], r == self.replica))

    @property
    def best_tokens(self) -> int:
        return self.held[self.best_replica]

    @property
    def given_up(self) -> int:
        return max(0, self.best_tokens - (self.cached_tokens or 0))

    def reason(self) -> str:
        served, best, cached = self.replica, self.best_replica, self.cached_tokens or 0
        if self.cached_tokens is None:
            return f"{served} gave no cached_tokens (start vLLM with --enable-prompt-tokens-details)"
        if cached > self.best_tokens:
            return (f"{served} reported {cached} cached tokens, more than kvviz saw it hold "
                    f"({self.held[served]}): the view missed some of its events")
        if self.best_tokens == 0:
            return "no replica held a whole block of its prompt: it had to be computed wherever it went"
        if self.given_up == 0:
            return f"served where the longest prefix was: {served} held {cached} of its {self.prompt_tokens} tokens"
        busy = self.in_flight.get(served, 0), self.in_flight.get(best, 0)
        why = (f"{best} was busier ({busy[1]} requests in flight, {served} {busy[0]}): a load-balancing choice"
               if busy[1] > busy[0] else
               f"load does not explain it ({served} had {busy[0]} requests in flight, {best} {busy[1]}): "
               "a prefix-blind choice")
        return (f"{best} held {self.best_tokens} tokens of its prompt, {served} (where it went) {cached}: "
                f"{self.given_up} tokens computed again; {why}")

    def row(self) -> dict:
        return {"request": self.name, "replica": self.replica, "t_s": round(self.sent_s, 3),
                "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "held_there": self.held.get(self.replica), "best_replica": self.best_replica,
                "best_tokens": self.best_tokens, "given_up": self.given_up, "reason": self.reason(),
                "complete": self.complete}


def replica_names(recording: Recording) -> dict[str, str]:
    """URL -> r0, r1, ... (the watch's order; URLs seen only in records follow)."""
    names = dict(recording.meta.get("replicas") or {})
    for url in [*recording.meta.get("urls", []), *(b.url for b in recording.batches),
                *(r.reply.url for r in recording.replies)]:
        names.setdefault(url, f"r{len(names)}")
    return names


@dataclass
class StreamView:
    """Whether one replica's event stream was seen whole so far."""

    first_seq: int | None = None
    last_seq: int | None = None
    gap: bool = False

    def see(self, seq: int) -> None:
        if self.first_seq is None:
            self.first_seq = seq
        elif self.last_seq is not None and seq > self.last_seq + 1:
            self.gap = True
        self.last_seq = seq if self.last_seq is None else max(self.last_seq, seq)

    @property
    def whole(self) -> bool:
        return self.first_seq in (0, None) and not self.gap


@dataclass
class Fleet:
    names: dict[str, str]
    requests: list[FleetRequest] = field(default_factory=list)
    pools: dict[str, CachedBlocks] = field(default_factory=dict)  # engine key -> its cache (events)
    streams: dict[str, StreamView] = field(default_factory=dict)
    first_seq: dict[str, int] = field(default_factory=dict)  # url -> its first batch's sequence number


def fleet_requests(recording: Recording) -> Fleet:
    """Every logged request, with what each replica held when it was sent."""
    names = replica_names(recording)
    fleet = Fleet(names)
    batches = sorted(recording.batches, key=lambda b: b.batch.ts)
    replies = sorted((r.reply for r in recording.replies if r.reply.url in names), key=lambda r: r.sent_s)
    replies = replies[-MAX_FLEET_REQUESTS:]
    t0 = replies[0].sent_s if replies else 0.0
    for b in reversed(batches):  # each replica's first batch: seen from sequence 0, or not
        fleet.first_seq[b.url] = b.seq
    i = 0
    for reply in replies:
        while i < len(batches) and batches[i].batch.ts < reply.sent_s:
            b = batches[i]
            fleet.pools.setdefault(engine_key(b.url, b.rank), CachedBlocks()).apply(b.seq, b.batch)
            fleet.streams.setdefault(b.url, StreamView()).see(b.seq)
            i += 1
        fleet.requests.append(fleet_request(fleet, reply, replies, t0))
    for b in batches[i:]:  # the caches as they ended, for the prefix map
        fleet.pools.setdefault(engine_key(b.url, b.rank), CachedBlocks()).apply(b.seq, b.batch)
        fleet.streams.setdefault(b.url, StreamView()).see(b.seq)
    return fleet


def fleet_request(fleet: Fleet, reply: Reply, replies: list[Reply], t0: float) -> FleetRequest:
    ids = list(reply.prompt_token_ids or [])
    held = {}
    for url, name in fleet.names.items():
        pool = fleet.pools.get(engine_key(url, 0))
        size = pool.block_size if pool is not None else None
        held[name] = would_hit.check(pool, ids, size).cached_tokens if pool is not None and size and ids else 0
    in_flight = {name: sum(1 for r in replies if r.url == url and r.sent_s < reply.sent_s < r.done_s)
                 for url, name in fleet.names.items()}
    complete = (bool(ids) and reply.url in fleet.first_seq  # every stream seen from its first batch,
                and all(seq == 0 for seq in fleet.first_seq.values())  # without a gap so far
                and not any(view.gap for view in fleet.streams.values()))
    return FleetRequest(name=reply.name, replica=fleet.names[reply.url], sent_s=reply.sent_s - t0,
                        prompt_tokens=reply.prompt_tokens, cached_tokens=reply.cached_tokens, held=held,
                        in_flight=in_flight, complete=complete)


MAX_PREFIX_ROWS = 30


def prefix_rows(fleet: Fleet, replies: list[Reply]) -> list[dict]:
    """The prefix × replica map: per cached first block (a prefix family, merged across replicas by
    its block hash), the tokens each replica holds of it (its longest cached chain from that
    block), labelled by the first logged request whose prompt begins with it. The
    MAX_PREFIX_ROWS families holding the most tokens in all, most first."""
    held: dict = {}  # root hash -> {replica: tokens}
    roots_tokens: dict = {}
    for url, name in fleet.names.items():
        pool = fleet.pools.get(engine_key(url, 0))
        if pool is None or not pool.block_size:
            continue
        for root, depth in chain_depths(pool).items():
            held.setdefault(root, {})[name] = depth * pool.block_size
            roots_tokens[root] = pool.blocks[root].token_ids
    labels = first_requests(replies)
    rows = [{"prefix": labels.get(roots_tokens[root], f"first tokens {list(roots_tokens[root][:6])}…"),
             **{name: by_replica.get(name, 0) for name in fleet.names.values()},
             "replicas_holding": sum(1 for v in by_replica.values() if v)}
            for root, by_replica in held.items()]
    rows.sort(key=lambda r: -sum(r[name] for name in fleet.names.values()))
    return rows[:MAX_PREFIX_ROWS]


def chain_depths(pool: CachedBlocks) -> dict:
    """Root block hash -> the most blocks cached in one chain from it (a block whose parent is
    not cached is no root: an orphan is not reusable). Linear in the cached blocks."""
    depth: dict = {}
    best: dict = {}
    for block_hash in pool.blocks:
        path, node = [], block_hash
        while node in pool.blocks and node not in depth and len(path) <= len(pool.blocks):
            path.append(node)
            node = pool.blocks[node].parent
        base = depth.get(node)  # a known block, or None at a root / a gap
        root = base[1] if base is not None else (path[-1] if path and pool.blocks[path[-1]].parent is None else None)
        n = base[0] if base is not None else 0
        for k, h in enumerate(reversed(path)):
            depth[h] = (n + k + 1, root)
        if root is not None and path:
            best[root] = max(best.get(root, 0), n + len(path))
    return best


def first_requests(replies: list[Reply]) -> dict[tuple, str]:
    """A prompt's first block's tokens (every block size seen) -> the first request that began so."""
    out: dict[tuple, str] = {}
    for reply in sorted(replies, key=lambda r: r.sent_s):
        ids = reply.prompt_token_ids or []
        for size in (16, 32, 64, 128, 256):
            if len(ids) >= size:
                out.setdefault(tuple(ids[:size]), reply.name)
    return out


def cut(recording: Recording, upto_s: float) -> Recording:
    """The records up to `upto_s` (watch time): the fleet as it stood then."""
    return Recording(recording.meta, [b for b in recording.batches if b.t_s <= upto_s],
                     [s for s in recording.scrapes if s.t_s <= upto_s], [],
                     [r for r in recording.replies if r.t_s <= upto_s])


def merged(watches) -> Recording:
    """One recording of several `EngineWatch`es (a page watches each server on its own), their
    records copied under their locks."""
    out = Recording({"kind": "vllm fleet watch", "replicas": {}, "urls": [], "servers": {}})
    for watch in watches:
        with watch.lock:
            rec = watch.recording
            out.meta["servers"].update(copy.deepcopy(rec.meta.get("servers", {})))
            out.batches += rec.batches
            out.scrapes += rec.scrapes
            out.replies += [ReplyRecord(r.t_s, copy.copy(r.reply)) for r in rec.replies]
        for url in watch.urls:
            out.meta["urls"].append(url)
            out.meta["replicas"].setdefault(url, f"r{len(out.meta['replicas'])}")
    out.batches.sort(key=lambda b: b.t_s)  # each watch's clock started on its own: close enough to
    out.scrapes.sort(key=lambda r: r.t_s)  # order a replay (the fleet itself orders by server time)
    return out


def wanted(recording: Recording) -> bool:
    """Whether a fleet view has something to say: two servers or more, or a request log."""
    return len(replica_names(recording)) > 1 or bool(recording.replies)


def totals(requests: list[FleetRequest]) -> dict:
    """Fleet locality: tokens the best replica held (available) against those served (achieved)."""
    prompt = sum(r.prompt_tokens for r in requests)
    achieved = sum(r.cached_tokens or 0 for r in requests)
    available = sum(max(r.best_tokens, r.cached_tokens or 0) for r in requests)
    return {"requests": len(requests), "prompt_tokens": prompt, "achieved_tokens": achieved,
            "available_tokens": available, "given_up_tokens": available - achieved,
            "requests_given_up": sum(1 for r in requests if r.given_up > 0),
            "achieved_rate": achieved / prompt if prompt else None,
            "available_rate": available / prompt if prompt else None}


def replica_rows(recording: Recording, fleet: Fleet, states: dict[str, EngineState]) -> list[dict]:
    """Per replica: its pool (metrics and events), usage, hit rate since server start (metrics),
    and over the logged requests: served, hit rate, locality given up."""
    rows = []
    for url, name in fleet.names.items():
        state = states.get(engine_key(url, 0))
        m = state.metrics if state is not None else None
        mine = [r for r in fleet.requests if r.replica == name]
        prompt = sum(r.prompt_tokens for r in mine)
        rows.append({"replica": name, "url": url,
                     "usable_blocks": m.num_usable_blocks if m else None,
                     "cached_blocks": state.pool.num_cached_blocks if state is not None else None,
                     "kv_cache_usage": m.kv_cache_usage if m else None,
                     "hit_rate_metrics": m.hit_rate if m else None,
                     "requests": len(mine),
                     "hit_rate_requests": sum(r.cached_tokens or 0 for r in mine) / prompt if prompt else None,
                     "given_up_tokens": sum(r.given_up for r in mine),
                     "view_complete": fleet.streams.get(url, StreamView()).whole})
    return rows
