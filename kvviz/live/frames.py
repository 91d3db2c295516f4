"""Pure reshapers: a sequence of `StepEvent` in, a long-form pandas DataFrame out.

Column names are the event field names (units in the names: `*_bytes`, `*_ms`), so the same
names run from events to DataFrames to chart encodings (see kvviz/viz/charts.py).
Nothing here mutates its input or keeps state; every function returns a fresh frame.
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from kvviz.core.events import BlockStat, StepEvent

STEP_COLUMNS = (
    "mode", "phase", "step", "step_ms", "elapsed_ms", "seq_len", "new_tokens",
    "positions", "positions_total", "kv_bytes", "formula_bytes",
    "num_used_blocks", "num_free_blocks", "paged_bytes", "contiguous_bytes",
    "cuda_allocated_bytes",
)
# Fields that may be missing (recompute mode has no blocks; CPU runs have no CUDA counters).
_NULLABLE_INT = ("num_used_blocks", "num_free_blocks", "paged_bytes", "contiguous_bytes",
                 "cuda_allocated_bytes")
_BLOCK_FIELDS = ("num_used_blocks", "num_free_blocks", "paged_bytes", "contiguous_bytes")

LAYOUT_PAGED = "paged (modelled)"
LAYOUT_CONTIGUOUS = "contiguous max-length"


def _step_columns(events: Sequence[StepEvent]) -> dict[str, list]:
    """Column lists, with the per-mode running sums, in one pass (this runs at every redraw)."""
    cols: dict[str, list] = {name: [] for name in STEP_COLUMNS}
    elapsed: dict[str, float] = {}
    positions: dict[str, int] = {}
    for e in events:
        elapsed[e.mode] = elapsed.get(e.mode, 0.0) + e.step_ms
        positions[e.mode] = positions.get(e.mode, 0) + e.positions
        row = {"mode": e.mode, "phase": e.phase, "step": e.step, "step_ms": e.step_ms,
               "elapsed_ms": elapsed[e.mode], "seq_len": e.seq_len, "new_tokens": e.step + 1,
               "positions": e.positions, "positions_total": positions[e.mode],
               "kv_bytes": e.kv_bytes, "formula_bytes": e.formula_bytes,
               "cuda_allocated_bytes": e.cuda_allocated_bytes}
        for name in _BLOCK_FIELDS:
            row[name] = None if e.blocks is None else getattr(e.blocks, name)
        for name, value in row.items():
            cols[name].append(value)
    return cols


def steps_frame(events: Sequence[StepEvent]) -> pd.DataFrame:
    """One row per event, in event order.

    Columns: mode, phase, step, step_ms, elapsed_ms, seq_len, new_tokens, positions,
    positions_total, kv_bytes, formula_bytes, num_used_blocks, num_free_blocks, paged_bytes,
    contiguous_bytes, cuda_allocated_bytes.

    elapsed_ms and positions_total are running sums of step_ms and positions within each
    mode; new_tokens is the tokens generated per sequence so far (the prefill's token + decode
    steps, i.e. step + 1). Block fields and cuda_allocated_bytes are nullable Int64 (<NA> when
    the event has no BlockStat / no CUDA counter). No events -> empty frame, same columns.
    """
    cols = _step_columns(events)
    dtypes = {name: "Int64" for name in _NULLABLE_INT} | {
        name: "int64" for name in ("step", "seq_len", "new_tokens", "positions", "positions_total",
                                   "kv_bytes", "formula_bytes")} | {"step_ms": "float64", "elapsed_ms": "float64"}
    return pd.DataFrame({name: pd.array(values, dtype=dtypes.get(name, "object"))
                         for name, values in cols.items()})


def layer_bytes_frame(event: StepEvent) -> pd.DataFrame:
    """Bytes each layer's K and V hold after one event.

    Columns: layer, kind ("K" or "V"), kv_bytes, tokens. Rows ordered layer by layer, K before V.
    """
    rows = [
        {"layer": s.layer, "kind": kind, "kv_bytes": nbytes, "tokens": s.tokens}
        for s in event.layers
        for kind, nbytes in (("K", s.k_bytes), ("V", s.v_bytes))
    ]
    return pd.DataFrame(rows, columns=["layer", "kind", "kv_bytes", "tokens"])


def layer_times_frame(events: Sequence[StepEvent]) -> pd.DataFrame:
    """Forward time of every layer in every event.

    Columns: mode, step, phase, layer, forward_ms. One row per (event, layer).
    """
    rows = [
        {"mode": e.mode, "step": e.step, "phase": e.phase, "layer": s.layer,
         "forward_ms": s.forward_ms}
        for e in events
        for s in e.layers
    ]
    return pd.DataFrame(rows, columns=["mode", "step", "phase", "layer", "forward_ms"])


def _block_row(block: int, per_seq: int, num_seq_blocks: int, blocks: BlockStat) -> dict:
    if block >= num_seq_blocks:
        return {"block": block, "seq": -1, "slot_fill": 0, "state": "free"}
    seq, index = divmod(block, per_seq)
    is_last = index == per_seq - 1
    fill = blocks.num_slots_in_last_block if is_last else blocks.block_size
    state = "full" if fill >= blocks.block_size else "partial"
    return {"block": block, "seq": seq, "slot_fill": fill, "state": state}


def block_grid_frame(blocks: BlockStat, batch: int, max_blocks: int = 1024) -> pd.DataFrame:
    """One row per block of the pool, for drawing the pool as a grid.

    Columns: block (pool index), seq (owning sequence, -1 when free), slot_fill (filled token
    slots), state ("full", "partial" or "free").

    Every sequence owns num_used_blocks // batch blocks (same padded length), laid out in
    contiguous runs: seq 0's blocks first, then seq 1's, ..., then the free blocks. Each
    sequence's last block holds num_slots_in_last_block slots. Only the first `max_blocks`
    blocks get a row: when blocks.num_blocks > max_blocks the caller shows a note saying so.
    """
    per_seq = blocks.num_used_blocks // batch if batch > 0 else 0
    num_seq_blocks = per_seq * batch
    rows = [_block_row(b, per_seq, num_seq_blocks, blocks)
            for b in range(min(blocks.num_blocks, max_blocks))]
    return pd.DataFrame(rows, columns=["block", "seq", "slot_fill", "state"])


def reservation_frame(blocks: BlockStat, kv_bytes: int) -> pd.DataFrame:
    """Used vs reserved-but-unused bytes under two layouts of the same tokens.

    Columns: layout ("paged (modelled)" or "contiguous max-length"), part ("used" or
    "unused"), bytes, wasted_fraction (unused / reserved for that layout; 0 when nothing is
    reserved). Two rows per layout, paged first.
    """
    rows = []
    for layout, reserved in ((LAYOUT_PAGED, blocks.paged_bytes),
                             (LAYOUT_CONTIGUOUS, blocks.contiguous_bytes)):
        unused = max(reserved - kv_bytes, 0)
        wasted = unused / reserved if reserved > 0 else 0.0
        rows += [{"layout": layout, "part": "used", "bytes": kv_bytes, "wasted_fraction": wasted},
                 {"layout": layout, "part": "unused", "bytes": unused, "wasted_fraction": wasted}]
    return pd.DataFrame(rows, columns=["layout", "part", "bytes", "wasted_fraction"])
