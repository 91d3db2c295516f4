"""What kvviz knows about each watched engine, updated the same way live and in replay.

An engine is one DP rank of one server, keyed "host:port · rank N". Its state joins the prefix
cache rebuilt from events (`CachedBlocks`), the latest `/metrics` scrape, and a history row per
scrape (for the charts over time). Live watching and replaying a recording both call
`apply_batch` and `apply_scrape`, so the panels cannot tell them apart.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kvviz.vllm.events import KVEventBatch
from kvviz.vllm.metrics import EngineMetrics
from kvviz.vllm.pool import CachedBlocks
from kvviz.vllm.replies import joined_rows
from kvviz.vllm.request_log import MAX_REPLIES, Reply
from kvviz.vllm.requests import RequestLedger

MAX_HISTORY = 3600  # rows kept per engine (an hour at one scrape a second)


def engine_key(url: str, rank: int | str) -> str:
    host = url.split("://", 1)[-1]
    return f"{host} · rank {rank}"


@dataclass(kw_only=True)
class EngineState:
    key: str
    pool: CachedBlocks = field(default_factory=CachedBlocks)
    metrics: EngineMetrics | None = None
    history: list[dict] = field(default_factory=list)
    ledger: RequestLedger = field(default_factory=RequestLedger)  # per request, block lives
    replies: list[Reply] = field(default_factory=list)  # the client's request log, for this server

    def request_rows(self) -> list[dict]:
        """One row per request: the ledger's (events) joined with the request log's."""
        return joined_rows(self.ledger, self.replies, self.pool.block_size)

    def history_row(self, t_s: float) -> dict:
        """One row of the charts over time; None where the metrics have not been read yet."""
        m, counts = self.metrics, self.pool.counts
        return {"t_s": round(t_s, 3),
                "num_cached_blocks": self.pool.num_cached_blocks,
                "num_stored": counts.num_stored, "num_removed": counts.num_removed,
                "num_reused": counts.num_reused,
                "num_held_blocks": m.num_held_blocks if m else None,
                "num_requests_running": m.num_requests_running if m else None,
                "num_requests_waiting": m.num_requests_waiting if m else None,
                "num_preemptions": m.num_preemptions if m else None,
                "prefix_cache_hits": m.prefix_cache_hits if m else None,
                "prefix_cache_queries": m.prefix_cache_queries if m else None}


def state_for(states: dict[str, EngineState], url: str, rank: int | str) -> EngineState:
    key = engine_key(url, rank)
    if key not in states:
        states[key] = EngineState(key=key)
    return states[key]


def apply_batch(states: dict[str, EngineState], url: str, rank: int, seq: int,
                batch: KVEventBatch) -> None:
    """The batch to the pool and, when the pool took it (not a duplicate), to the ledger; a
    restart (the pool starts over) starts the ledger over too."""
    state = state_for(states, url, rank)
    counts = state.pool.counts
    restarts, batches = counts.num_restarts, counts.num_batches
    state.pool.apply(seq, batch)
    if state.pool.counts.num_restarts != restarts:
        state.ledger = RequestLedger()
    if state.pool.counts.num_batches != batches or state.pool.counts.num_restarts != restarts:
        state.ledger.apply(batch)


def apply_scrape(states: dict[str, EngineState], url: str, engines: dict[str, EngineMetrics],
                 t_s: float) -> None:
    """Attach each engine's metrics (engine label = DP rank) and add a history row."""
    for engine, metrics in engines.items():
        state = state_for(states, url, engine)
        state.metrics = metrics
        state.ledger.usable_blocks = metrics.num_usable_blocks
        state.history.append(state.history_row(t_s))
        del state.history[:-MAX_HISTORY]


def apply_reply(states: dict[str, EngineState], reply: Reply) -> None:
    """A request log line to its server's state. The client cannot tell a server's DP ranks
    apart, so it goes to rank 0."""
    state = state_for(states, reply.url, 0)
    state.replies.append(reply)
    del state.replies[:-MAX_REPLIES]


def summary(state: EngineState) -> dict:
    """The numbers `kvviz watch` prints: events seen, peak blocks, hit rates (tokens)."""
    counts, m = state.pool.counts, state.metrics
    held = [r["num_held_blocks"] for r in state.history if r["num_held_blocks"] is not None]
    return {"engine": state.key, "batches": counts.num_batches, "blocks_stored": counts.num_stored,
            "blocks_removed": counts.num_removed, "caches_cleared": counts.num_cleared,
            "blocks_reused": counts.num_reused, "restarts": counts.num_restarts,
            "cached_blocks_now": state.pool.num_cached_blocks,
            "peak_cached_blocks": max((r["num_cached_blocks"] for r in state.history), default=0),
            "peak_held_blocks": max(held, default=None),
            "usable_blocks": m.num_usable_blocks if m else None,
            "hit_rate": m.hit_rate if m else None, "preemptions": m.num_preemptions if m else None}


def request_rows(states: dict[str, EngineState]) -> list[dict]:
    """Every engine's per-request rows (events; derived), each with its engine's key first."""
    return [{"engine": key, **row} for key, state in sorted(states.items()) for row in state.request_rows()]


def format_summary(row: dict) -> str:
    usable = row["usable_blocks"]
    peak = row["peak_held_blocks"]
    rate = row["hit_rate"]
    return "\n".join([
        f"{row['engine']}: {row['batches']} event batches",
        f"  blocks stored {row['blocks_stored']}, evicted {row['blocks_removed']}, reported reused "
        f"{row['blocks_reused']}, cache cleared {row['caches_cleared']}×, restarts {row['restarts']}",
        f"  cached now {row['cached_blocks_now']}, peak cached {row['peak_cached_blocks']}"
        + (f", peak held by requests {peak} of {usable} usable" if peak is not None else ""),
        "  prefix-cache hit rate (metrics, since server start): "
        + (f"{rate:.1%}" if rate is not None else "no queries yet")
        + (f", preemptions {row['preemptions']:.0f}" if row["preemptions"] is not None else "")])
