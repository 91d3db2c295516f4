"""Block residency from the block log (events; derived): how long blocks lived, how often they were
reused, how long they idled before eviction, and the sentence a capacity planner needs.

Every figure is computed from the server's batch times in the KV events: a block's life runs from
the batch that stored it to the batch that evicted (or cleared) it; its reuses are the prefix-cache
hits vLLM reported for it; its idle time is eviction less its last use (or its store, never
reused). "Needed again" means the same hash was stored anew after its eviction: a request wanted
exactly that block and computed it again.
"""
from __future__ import annotations

import statistics

import pandas as pd

from kvviz.vllm.blocklog import EVICTED, BlockLog

SOON_S = 10.0  # "needed again within 10 s of eviction"
COLUMNS = ["stored_s", "reuses", "lifetime_s", "idle_before_eviction_s", "ended_by"]


def lives_frame(log: BlockLog, t0: float) -> pd.DataFrame:
    """One row per ended life. Columns: COLUMNS (times in seconds; stored_s from the first batch)."""
    rows = [{"stored_s": life.stored_s - t0, "reuses": len(life.uses_s),
             "lifetime_s": life.ended_s - life.stored_s,
             "idle_before_eviction_s": life.ended_s - life.last_use_s if life.ended_by == EVICTED else None,
             "ended_by": life.ended_by} for life in log.ended]
    return pd.DataFrame(rows, columns=COLUMNS)


def gaps_frame(log: BlockLog) -> pd.DataFrame:
    """Seconds between a block's store and its first reuse, and between successive reuses, over
    every block seen (cached now or not). Column: gap_s."""
    gaps = []
    for life in [*log.ended, *log.live.values()]:
        times = [life.stored_s, *life.uses_s]
        gaps.extend(b - a for a, b in zip(times, times[1:]))
    return pd.DataFrame({"gap_s": gaps})


def reuse_counts_frame(log: BlockLog) -> pd.DataFrame:
    """Reuses per block life, cached now or ended. Column: reuses."""
    return pd.DataFrame({"reuses": [len(life.uses_s) for life in [*log.ended, *log.live.values()]]})


def capacity_sentence(log: BlockLog) -> str | None:
    """'evicted blocks idled a median of X s; Y % were needed again within 10 s ...', or None
    before the first eviction."""
    evicted = [life for life in log.ended if life.ended_by == EVICTED]
    if not evicted:
        return None
    idle = statistics.median(life.ended_s - life.last_use_s for life in evicted)
    soon = sum(1 for s in log.restored_after_s if s <= SOON_S)
    share = soon / len(evicted)
    text = (f"{len(evicted):,} evicted blocks idled a median of {idle:.1f} s before eviction; "
            f"{share:.0%} were needed again within {SOON_S:g} s of their eviction")
    if share > 0:
        text += " (stored anew by a later request): a larger pool or CPU offload would have kept them"
    return text + "."
