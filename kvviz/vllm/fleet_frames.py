"""The fleet view's tables, as DataFrames. Pure.

From a recording of several replicas and a client's request log (`kvviz.vllm.fleet`): one row per
replica (pool, usage and hit rate side by side), one per request (served where, cached there,
the most any replica held, what was given up, why), the fleet's totals, and the what-if routing
policies (`kvviz.vllm.fleet_model`, modelled).
"""
from __future__ import annotations

import pandas as pd

from kvviz.core.errors import UserError
from kvviz.vllm import fleet, fleet_model
from kvviz.vllm.trace import Recording
from kvviz.vllm.state import EngineState, engine_key

REPLICA_COLUMNS = ["replica", "url", "usable_blocks", "cached_blocks", "kv_cache_usage", "hit_rate_metrics",
                   "requests", "hit_rate_requests", "given_up_tokens", "view_complete"]
REQUEST_COLUMNS = ["request", "replica", "t_s", "prompt_tokens", "cached_tokens", "held_there",
                   "best_replica", "best_tokens", "given_up", "reason", "complete"]
POLICY_COLUMNS = ["policy", "how", "requests", "prompt_tokens", "cached_tokens", "recomputed_tokens",
                  "hit_rate", "matches_real"]


def replicas_frame(recording: Recording, view: fleet.Fleet, states: dict[str, EngineState]) -> pd.DataFrame:
    return pd.DataFrame(fleet.replica_rows(recording, view, states), columns=REPLICA_COLUMNS)


def requests_frame(view: fleet.Fleet) -> pd.DataFrame:
    """One row per logged request, in sending order."""
    return pd.DataFrame([r.row() for r in view.requests], columns=REQUEST_COLUMNS)


def given_up_frame(view: fleet.Fleet) -> pd.DataFrame:
    """Long form for the per-request bars: request, order, part ("cached where it went" /
    "given up"), tokens."""
    rows = []
    for i, r in enumerate(view.requests):
        rows.append({"request": r.name, "order": i, "part": "cached where it went", "tokens": r.cached_tokens or 0})
        rows.append({"request": r.name, "order": i, "part": "given up", "tokens": r.given_up})
    return pd.DataFrame(rows, columns=["request", "order", "part", "tokens"])


def prefix_frame(recording: Recording, view: fleet.Fleet) -> pd.DataFrame:
    """Long form of the prefix × replica map: prefix, replica, tokens (held at the end: events)."""
    rows = fleet.prefix_rows(view, [r.reply for r in recording.replies])
    return pd.DataFrame([{"prefix": row["prefix"], "replica": name, "tokens": row[name]}
                         for row in rows for name in view.names.values()], columns=["prefix", "replica", "tokens"])


def model_inputs(recording: Recording, view: fleet.Fleet, states: dict[str, EngineState]):
    """(urls, usable blocks per replica, block size) for the model, or a sentence why not."""
    urls = list(view.names)
    usable, size = [], None
    for url in urls:
        state = states.get(engine_key(url, 0))
        m = state.metrics if state is not None else None
        if m is None or m.num_usable_blocks is None:
            return f"no /metrics scrape of {view.names[url]} gave its pool size"
        usable.append(m.num_usable_blocks)
        size = size or state.pool.block_size or _int(m.cache_config.get("block_size"))
    if not size:
        return "no event or scrape gave the block size"
    return urls, usable, size


def _int(text) -> int | None:
    return int(text) if isinstance(text, str) and text.isdigit() else None


def policies_frame(recording: Recording, view: fleet.Fleet, states: dict[str, EngineState]) -> pd.DataFrame | str:
    """Every policy's modelled hit rate and recomputed tokens over the logged stream; `matches_real`:
    requests whose modelled cached tokens equal vLLM's (the as-routed row is the model's check).
    A sentence instead when the model cannot run."""
    inputs = model_inputs(recording, view, states)
    if isinstance(inputs, str):
        return inputs
    urls, usable, size = inputs
    replies = [r.reply for r in recording.replies if r.reply.url in view.names]
    replies = sorted(replies, key=lambda r: r.sent_s)[-fleet.MAX_FLEET_REQUESTS:]
    real = {r.name: r.cached_tokens for r in replies}
    rows = []
    for policy in fleet_model.POLICIES:
        try:
            routed = fleet_model.replay(replies, urls, policy, usable, size)
        except UserError as exc:
            return str(exc)
        rows.append({"policy": policy, "how": fleet_model.POLICY_WORDS[policy],
                     **fleet_model.policy_summary(routed),
                     "matches_real": sum(1 for r in routed if real.get(r.name) == r.cached_tokens)})
    return pd.DataFrame(rows, columns=POLICY_COLUMNS)


def totals_sentence(totals: dict) -> str:
    if not totals["requests"]:
        return "No request in the request log yet."
    return (f"{totals['requests']} requests, {totals['prompt_tokens']:,} prompt tokens: the replicas that "
            f"served them had {totals['achieved_tokens']:,} cached ({totals['achieved_rate']:.1%}); the "
            f"replica holding the most of each prompt had {totals['available_tokens']:,} "
            f"({totals['available_rate']:.1%}). Locality given up: {totals['given_up_tokens']:,} tokens "
            f"in {totals['requests_given_up']} requests.")
