"""Frames of the Engine page: one watched engine's state in, tables out (its charts:
kvviz.vllm.charts). Pure.

Where each number comes from is part of its series name: "(events)" from the KV-event stream,
"(metrics)" from `/metrics`, "(derived)" computed from both as the docstring says.
"""
from __future__ import annotations

import math

from collections.abc import Callable

import pandas as pd

from kvviz.core.blocks import hit_block_sentence
from kvviz.vllm.pool import CachedBlocks
from kvviz.vllm.state import EngineState

HELD, CACHED_FREE, FREE = "held by running requests (metrics)", "cached, free to evict (derived)", "free (derived)"
POOL_COLORS = {HELD: "#4C78A8", CACHED_FREE: "#9E9AC8", FREE: "#E4E4E4"}
OVER_TIME = {"cached blocks (events)": "#6A3D9A", "held by requests (metrics)": "#4C78A8",
             "stored, cumulative (events)": "#54A24B", "evicted, cumulative (events)": "#E45756"}
REQUEST_COLORS = {"running (metrics)": "#4C78A8", "waiting (metrics)": "#F58518"}
MAX_SEQUENCES = 40  # rows of the prefix-tree picture (the most recent sequences)
MAX_POSITIONS = 128  # blocks drawn per sequence (its first ones): 5,120 cells at most
MAX_TABLE_BLOCKS = 300
CONFIG_KEYS = ["block_size", "num_gpu_blocks", "num_gpu_blocks_override", "enable_prefix_caching",
               "prefix_caching_hash_algo", "cache_dtype", "kv_cache_memory_bytes", "kv_cache_size_tokens",
               "kv_cache_max_concurrency", "gpu_memory_utilization", "sliding_window"]
TextFn = Callable[[tuple[int, ...]], str]


def pool_counts(state: EngineState) -> dict[str, int] | None:
    """Blocks of the pool by what holds them; None before the first /metrics scrape.

    held: usage × usable blocks (metrics). cached, free to evict: cached blocks (events) less
    those a running request holds, taken as every held block but each request's last, partial
    one (vLLM caches every full block); exact when nothing runs. free: the rest.
    """
    m = state.metrics
    if m is None or m.num_usable_blocks is None:
        return None
    usable, held = m.num_usable_blocks, m.num_held_blocks or 0
    held_full = max(0, held - int(m.num_requests_running))
    cached_free = min(max(0, state.pool.num_cached_blocks - held_full), usable - held)
    return {HELD: held, CACHED_FREE: cached_free, FREE: max(0, usable - held - cached_free)}


def pool_frame(state: EngineState) -> pd.DataFrame:
    """Columns: part, blocks, order."""
    counts = pool_counts(state) or {}
    return pd.DataFrame({"part": list(counts), "blocks": list(counts.values()),
                         "order": range(len(counts))}, columns=["part", "blocks", "order"])


def history_frame(state: EngineState) -> pd.DataFrame:
    """Columns: t_s, series, blocks: cached / held now and stored / evicted so far, per scrape."""
    names = dict(zip(OVER_TIME, ["num_cached_blocks", "num_held_blocks", "num_stored", "num_removed"]))
    rows = [{"t_s": r["t_s"], "series": name, "blocks": r[col]}
            for r in state.history for name, col in names.items() if r[col] is not None]
    return pd.DataFrame(rows, columns=["t_s", "series", "blocks"])


def requests_frame(state: EngineState) -> pd.DataFrame:
    """Columns: t_s, series, requests."""
    names = dict(zip(REQUEST_COLORS, ["num_requests_running", "num_requests_waiting"]))
    rows = [{"t_s": r["t_s"], "series": name, "requests": r[col]}
            for r in state.history for name, col in names.items() if r[col] is not None]
    return pd.DataFrame(rows, columns=["t_s", "series", "requests"])


def histogram_frame(state: EngineState, name: str) -> pd.DataFrame:
    """Columns: le, bucket, requests: observations per bucket of a vLLM histogram (metrics)."""
    hist = state.metrics.histograms.get(name) if state.metrics else None
    if hist is None:
        return pd.DataFrame(columns=["le", "bucket", "requests"])
    counts = hist.per_bucket()
    used = [i for i, c in enumerate(counts) if c] or [0]
    keep = range(max(0, used[0] - 1), min(len(counts), used[-1] + 2))  # one empty bucket each side
    return pd.DataFrame({"le": list(keep), "bucket": [f"≤ {hist.le[i]} s" for i in keep],
                         "requests": [counts[i] for i in keep]})


def sharers(pool: CachedBlocks) -> dict:
    """hash -> how many cached sequences (root-to-leaf paths) pass through the block: the leaves
    below it, counted children first in one pass over the tree (linear in the cached blocks)."""
    kids = pool.children()
    order, stack = [], list(kids.get(None, []))
    while stack:
        block_hash = stack.pop()
        order.append(block_hash)
        stack.extend(kids.get(block_hash, []))
    counts: dict = {}
    for block_hash in reversed(order):
        counts[block_hash] = sum(counts[k] for k in kids.get(block_hash, [])) or 1
    return counts


def ids_text(token_ids: tuple[int, ...]) -> str:
    return " ".join(map(str, token_ids))


def tree_frame(pool: CachedBlocks, text: TextFn = ids_text) -> pd.DataFrame:
    """Columns: sequence, position, block, shared_by, text: one row per block of each of the
    most recent cached sequences (root-to-leaf paths of the prefix tree; events), at most the
    first MAX_POSITIONS blocks of each."""
    shared = sharers(pool)
    rows = []
    for i, leaf in enumerate(pool.leaves()[-MAX_SEQUENCES:]):
        for block_hash in pool.path(leaf)[:MAX_POSITIONS]:
            block = pool.blocks[block_hash]
            rows.append({"sequence": f"seq {i + 1}", "position": block.depth, "block": short_hash(block_hash),
                         "shared_by": shared.get(block_hash, 1), "text": text(block.token_ids)[:400]})
    return pd.DataFrame(rows, columns=["sequence", "position", "block", "shared_by", "text"])


def blocks_table(pool: CachedBlocks, text: TextFn = ids_text) -> pd.DataFrame:
    """Columns: block, parent, position, shared_by, tokens: the cached blocks in tree order."""
    shared, kids = sharers(pool), pool.children()
    rows, stack = [], list(reversed(kids.get(None, [])))
    while stack and len(rows) < MAX_TABLE_BLOCKS:
        block_hash = stack.pop()
        block = pool.blocks[block_hash]
        rows.append({"block": short_hash(block_hash), "parent": short_hash(block.parent),
                     "position": block.depth, "shared_by": shared.get(block_hash, 1),
                     "tokens": text(block.token_ids)})
        stack.extend(reversed(kids.get(block_hash, [])))
    return pd.DataFrame(rows, columns=["block", "parent", "position", "shared_by", "tokens"])


def short_hash(block_hash) -> str:
    if block_hash is None:
        return ""
    if isinstance(block_hash, bytes):
        return block_hash.hex()[:8]
    return f"{block_hash & 0xFFFFFFFF:08x}"


def config_frame(state: EngineState) -> pd.DataFrame:
    """Columns: setting, value: vllm:cache_config_info's labels, the important ones first."""
    config = state.metrics.cache_config if state.metrics else {}
    keys = [k for k in CONFIG_KEYS if k in config] + sorted(k for k in config if k not in CONFIG_KEYS)
    return pd.DataFrame({"setting": keys, "value": [config[k] for k in keys]})


def hit_block(state: EngineState) -> tuple[int | None, str]:
    """(tokens, where from): the block vLLM's prefix hits come in on this server. vLLM 0.32 aligns a
    hit to the least common multiple of its cache groups' block sizes (`scheduler_block_size` in
    vllm/v1/core/kv_cache_utils.py); the groups' sizes come from the events (BlockStored's
    block_size per group_idx), else from the metrics' cache_config block_size."""
    sizes = state.pool.group_block_sizes
    if sizes:
        return math.lcm(*sizes.values()), "events"
    size = state.metrics.cache_config.get("block_size", "") if state.metrics else ""
    return (int(size), "metrics") if size.isdigit() and int(size) > 0 else (None, "")


def never_hits_sentence(state: EngineState) -> str | None:
    """"A shared prefix shorter than N tokens never hits on this server", with N and its source."""
    block, source = hit_block(state)
    if block is None:
        return None
    groups = state.pool.group_block_sizes
    per_group = (" (cache groups: " + ", ".join(f"{g}: {b}" for g, b in sorted(groups.items())) + ")"
                 if len(groups) > 1 else "")
    return (hit_block_sentence(block, per_group) + f" ({source}; with a hybrid model's Mamba groups "
            "a hit also needs the Mamba state vLLM kept at that boundary: often fewer).")
