"""Frames of the per-request table and the block lifetimes (their charts: kvviz.vllm.request_charts).
Pure.

Every column comes from the KV events (`kvviz.vllm.requests`, `kvviz.vllm.lifetimes`): cached
tokens are reused blocks × block size (vLLM's own count of prompt tokens served from the cache),
the reasons are derived from the block log, times are the server's batch times; and, where a
client's request log was read (`kvviz.vllm.replies`), vLLM's own per-request cached tokens and
the rows of requests no event names (`source`).
"""
from __future__ import annotations

import pandas as pd

from kvviz.viz.export import csv_text
from kvviz.vllm import lifetimes
from kvviz.vllm.reasons import CODES
from kvviz.vllm.state import EngineState

COLUMNS = ["request", "t_s", "prompt_tokens", "cached_tokens", "vllm_cached_tokens", "reused_blocks",
           "stored_blocks", "reason", "miss_reason", "first_miss_token", "session_id", "reuse_source", "source"]
LIFETIME_CHARTS = {  # frame column -> axis title
    "lifetime_s": "lifetime of evicted blocks, s (events)",
    "idle_before_eviction_s": "idle before eviction, s (events)",
    "gap_s": "time between reuses of a block, s (events)",
    "reuses": "reuses per block (events)",
}


def requests_frame(state: EngineState) -> pd.DataFrame:
    """One row per request, newest first (events, joined with a client's request log when one
    was read: `vllm_cached_tokens` is then vLLM's own figure). Columns: COLUMNS."""
    return pd.DataFrame(state.request_rows()[::-1], columns=COLUMNS)


def reasons_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Columns: reason, requests (every code, zeros included, in CODES order)."""
    counts = df["reason"].value_counts() if not df.empty else pd.Series(dtype=int)
    return pd.DataFrame({"reason": list(CODES), "requests": [int(counts.get(c, 0)) for c in CODES]})


def lifetime_frames(state: EngineState) -> dict[str, pd.DataFrame]:
    """LIFETIME_CHARTS' column -> a one-column frame of its values (empty rows dropped)."""
    log, t0 = state.ledger.log, state.ledger.t0 or 0.0
    lives = lifetimes.lives_frame(log, t0)
    evicted = lives[lives.ended_by == "evicted"]
    return {"lifetime_s": evicted[["lifetime_s"]],
            "idle_before_eviction_s": evicted[["idle_before_eviction_s"]].astype(float),
            "gap_s": lifetimes.gaps_frame(log), "reuses": lifetimes.reuse_counts_frame(log)}


def csv_bytes(df: pd.DataFrame) -> bytes:
    """The table as CSV; request names and session ids come from clients: no cell starts a formula."""
    return csv_text(df).encode()
