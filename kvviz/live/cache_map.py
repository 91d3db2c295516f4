"""The cache map's data: which token positions each decoder layer's cache holds. Pure; no torch.

A run's cached events and its meta in, long-form DataFrames out (kvviz/live/cache_map_charts.py draws
them). Positions run along x, layers along y. After a step the cache holds positions
0 .. seq_len - 2 (the token just sampled is fed, and cached, by the next step); a layer that holds
`tokens` of them holds the newest ones, so a sliding or chunked layer's older positions are
"dropped". Each layer is drawn from its cache spec (kvviz.core.spec), read from the trace meta by
`RunMeta.specs` (format 3's `layers`, or an older file's lists).

Two frames keep the chart cheap at any width:
- `cells_frame`: one row per run of equal positions in one layer and tensor (run-length encoded:
  a full layer is two or three rectangles however long the text), so marks stay in the hundreds;
- `columns_frame`: one row per column of `bin_width` positions with its token text, for hover,
  binned so that there are at most MAX_COLUMNS columns.
Token text is untrusted: it only ever travels as chart data, never into a chart's Vega-Lite, title or label.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from kvviz.core.spec import CacheSpec, FullSpec, SharedSpec, StateSpec
from kvviz.core.events import StepEvent
from kvviz.core.meta import RunMeta

MAX_COLUMNS = 160  # hover / attention columns at most; wider runs are binned
MAX_TEXT_CHARS = 80  # a binned column's text is cut here, with an ellipsis
NEWLINE = "⏎"
CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # shown as U+FFFD: a tooltip cannot show them, SVG refuses them
SAFE_LABEL = re.compile(r"[^A-Za-z0-9 .·/+←-]")  # labels go into an axis expression and captions
CELL_COLUMNS = ["layer", "tensor_row", "shade", "status", "pos_start", "pos_end", "positions"]
COLUMN_COLUMNS = ["pos_start", "pos_end", "positions", "part", "text"]
MAP_COLUMNS = CELL_COLUMNS + [c for c in COLUMN_COLUMNS if c not in CELL_COLUMNS]
ATTENTION_COLUMNS = ["layer", "pos_start", "pos_end", "share", "part", "text"]


def layer_kinds(meta: RunMeta) -> tuple[CacheSpec, ...]:
    """Each layer's cache spec, from the trace meta (`kvviz.core.trace.layer_specs`)."""
    return meta.specs


def uniform_label(kinds: Sequence[CacheSpec]) -> str | None:
    """The one label every layer shares ("full", "sliding 8"), or None for a mixed model."""
    labels = {k.label() for k in kinds}
    return labels.pop() if len(labels) == 1 else None


def bin_width(max_len: int, max_columns: int = MAX_COLUMNS) -> int:
    """Positions per column: 1 up to max_columns positions, then just enough to fit."""
    return max(1, math.ceil(max_len / max_columns))


def prompt_len(meta: RunMeta) -> int:
    return meta.prompt_tokens or 0


def written(event: StepEvent) -> int:
    """Positions in the cache after `event`: all but the token it just sampled."""
    return max(event.seq_len - 1, 0)


def padding(meta: RunMeta, seq: int) -> int:
    """Left-padding positions of sequence `seq` (its prompt pieces are null there)."""
    pieces = _prompt_pieces(meta, seq)
    return sum(p is None for p in pieces) if pieces else 0


def _prompt_pieces(meta: RunMeta, seq: int) -> list | None:
    rows = meta.prompt_pieces
    if isinstance(rows, list) and 0 <= seq < len(rows) and isinstance(rows[seq], list):
        return rows[seq]
    return None


def _segments(start: int, end: int, held_from: int, pad: int, prompt: int) -> list[tuple]:
    """(status, first, last + 1) runs covering [start, end) for a layer holding [held_from, end)."""
    cuts = [("dropped", start, held_from), ("padding", max(start, held_from), pad),
            ("prompt", max(start, held_from, pad), prompt),
            ("generated", max(start, held_from, pad, prompt), end)]
    return [(status, a, min(b, end)) for status, a, b in cuts if min(b, end) > a]


def layer_cells(kind: CacheSpec, tokens: int, end: int, pad: int, prompt: int) -> list[tuple]:
    """(tensor_row, shade, status, first, last + 1) for one layer holding `tokens` of [0, end)."""
    if isinstance(kind, StateSpec):  # a fixed-size state summarises every position written so far
        return [(row, "state", "state", 0, end) for row in (0, 1)] if end else []
    shared_all = isinstance(kind, SharedSpec) and tokens == 0  # a layer reading another's KV, held there
    held_from = 0 if shared_all else end - min(tokens, end)
    rows = []
    for status, a, b in _segments(0, end, held_from, pad, prompt):
        for row, tensor in enumerate(kind.TENSORS):
            shade = status if status in ("dropped", "padding") else tensor
            rows.append((row, shade, status, a, b))
    return rows


def cell_rows(meta: RunMeta, event: StepEvent, seq: int = 0) -> list[tuple]:
    """cells_frame's rows, as tuples in CELL_COLUMNS order (none when the cache could not be read)."""
    if event.cache_note:
        return []
    end, pad, prompt = written(event), padding(meta, seq), prompt_len(meta)
    kinds = meta.specs
    rows = []
    for stat in event.layers:
        kind = kinds[stat.layer] if stat.layer < len(kinds) else FullSpec()
        rows += [(stat.layer, *cell, cell[4] - cell[3]) for cell in layer_cells(kind, stat.tokens, end, pad, prompt)]
    return rows


def cells_frame(meta: RunMeta, event: StepEvent, seq: int = 0) -> pd.DataFrame:
    """Runs of positions per layer and tensor row after `event`, for sequence `seq`.

    Columns: layer, tensor_row (0: K / latent, 1: V / rope key), shade (what the cell is drawn
    as: "K", "V", "latent (MLA)", "rope key (MLA)", "state", "shared", "dropped", "padding"),
    status ("prompt", "generated", "dropped", "padding", "state"), pos_start, pos_end (exclusive),
    positions (= pos_end - pos_start).
    """
    return pd.DataFrame(cell_rows(meta, event, seq), columns=CELL_COLUMNS)


def position_texts(meta: RunMeta, events: Sequence[StepEvent], seq: int = 0) -> list[str | None]:
    """The text of every written position of sequence `seq`: prompt pieces, then generated tokens.

    A padding position is None; a prompt position of a trace recorded without pieces is "".
    """
    prompt = prompt_len(meta)
    pieces = _prompt_pieces(meta, seq)
    texts = list(pieces[:prompt]) if pieces else []
    texts += [""] * (prompt - len(texts))
    texts += [e.texts[seq] if seq < len(e.texts) else "" for e in events]
    return texts[:written(events[-1])] if events else []


def _column_text(texts: Sequence[str | None]) -> str:
    """The column's text for display: newlines shown as ⏎, other control characters as �, lone
    surrogates (valid in JSON, not in UTF-8) as "?"."""
    joined = CONTROL.sub("\ufffd", "".join(t for t in texts if t).replace("\n", NEWLINE))
    joined = joined.encode("utf-8", "replace").decode("utf-8")
    return joined if len(joined) <= MAX_TEXT_CHARS else joined[:MAX_TEXT_CHARS - 1] + "…"


def _part(start: int, end: int, prompt: int, pad: int) -> str:
    if end <= pad:
        return "padding"
    if end <= prompt:
        return "prompt"
    return "generated" if start >= prompt else "prompt + generated"


def column_rows(meta: RunMeta, events: Sequence[StepEvent], seq: int = 0,
                width: int | None = None) -> list[tuple]:
    """columns_frame's rows, as tuples in COLUMN_COLUMNS order."""
    width = width or bin_width(meta.max_len or 1)
    texts = position_texts(meta, events, seq)
    prompt, pad = prompt_len(meta), padding(meta, seq)
    rows = []
    for a in range(0, len(texts), width):
        b = min(a + width, len(texts))
        rows.append((a, b, b - a, _part(a, b, prompt, pad), _column_text(texts[a:b])))
    return rows


def columns_frame(meta: RunMeta, events: Sequence[StepEvent], seq: int = 0,
                  width: int | None = None) -> pd.DataFrame:
    """One row per column of `width` positions written so far (default: bin_width of max_len).

    Columns: pos_start, pos_end (exclusive), positions, part ("prompt", "generated", "prompt +
    generated", "padding"), text (the column's token text, newlines as ⏎, cut at MAX_TEXT_CHARS).
    """
    return pd.DataFrame(column_rows(meta, events, seq, width), columns=COLUMN_COLUMNS)


def map_frame(meta: RunMeta, events: Sequence[StepEvent], seq: int = 0) -> pd.DataFrame:
    """The map's one dataset: cells_frame's rows (row "cell") then columns_frame's (row "column").

    Columns: row, then CELL_COLUMNS and COLUMN_COLUMNS (null where a row kind lacks them). Built
    in one pass (this runs at every redraw).
    """
    if not events:
        return pd.DataFrame(columns=["row", *MAP_COLUMNS])
    cells = [dict(zip(CELL_COLUMNS, r), row="cell") for r in cell_rows(meta, events[-1], seq)]
    cols = [dict(zip(COLUMN_COLUMNS, r), row="column") for r in column_rows(meta, events, seq)]
    return pd.DataFrame.from_records(cells + cols, columns=["row", *MAP_COLUMNS])


def attention_positions(row: Sequence[float], newest: int) -> range:
    """Positions a layer's attention row covers: its last entry is the newest position."""
    return range(newest - len(row) + 1, newest + 1)


def attention_frame(meta: RunMeta, events: Sequence[StepEvent], seq: int = 0,
                    width: int | None = None) -> pd.DataFrame:
    """The newest token's attention over the cached positions, per layer, summed per column.

    Columns: layer, pos_start, pos_end, share (the part of the layer's attention, averaged over
    heads, that falls on these positions: a layer's shares sum to 1), part, text. Only columns a
    layer read get a row. Empty when the last event carries no attention.
    """
    last = events[-1] if events else None
    if last is None or not last.attention or seq >= len(last.attention):
        return pd.DataFrame(columns=ATTENTION_COLUMNS)
    width = width or bin_width(meta.max_len or 1)
    columns = list(zip(*column_rows(meta, events, seq, width))) or [()] * len(COLUMN_COLUMNS)
    starts, ends, _, parts, texts = (np.asarray(c, dtype=object if i > 2 else np.int64) for i, c in enumerate(columns))
    newest, layers, picks, shares = written(last) - 1, [], [], []
    for layer, weights in enumerate(last.attention[seq]):
        first, sums = _column_sums(weights, newest, width)
        keep = max(0, min(len(sums), len(starts) - first))
        layers.append(np.full(keep, layer))
        picks.append(np.arange(first, first + keep))
        shares.append(sums[:keep])
    pick = np.concatenate(picks) if picks else np.array([], dtype=int)
    values = (np.concatenate(layers) if layers else pick, starts[pick], ends[pick],
              np.concatenate(shares) if shares else pick, parts[pick], texts[pick])
    return pd.DataFrame(dict(zip(ATTENTION_COLUMNS, values)), columns=ATTENTION_COLUMNS)


def _column_sums(weights: Sequence[float], newest: int, width: int) -> tuple[int, np.ndarray]:
    """(first column, each column's summed weight) of a row ending at position `newest`."""
    start = newest - len(weights) + 1
    row = np.asarray(weights[max(0, -start):], dtype=float)
    if not len(row):
        return 0, row
    cols = np.arange(max(start, 0), newest + 1) // width
    return int(cols[0]), np.bincount(cols - cols[0], weights=row)
