"""The cache map and the attention map as Altair charts. Pure: DataFrames and scalars in.

Both are built once per run (their scalars are fixed for a run: max length, prompt length, the
layers' kinds) and then re-fed with `charts.vega_lite_with_data`. The map's one dataset
(`cache_map.map_frame`) holds two kinds of rows: "cell" rows (runs of positions per layer and tensor, drawn)
and "column" rows (one per column of positions, drawn invisible over the whole height and carrying
the tooltip with the column's token text).
"""
from __future__ import annotations

import json
from collections.abc import Sequence

import altair as alt
import pandas as pd

from kvviz.core.spec import CacheSpec
from kvviz.live.cache_map import SAFE_LABEL, uniform_label

SHADES = {"K": "#4C78A8", "V": "#F58518", "latent (MLA)": "#B279A2", "rope key (MLA)": "#FF9DA6",
          "state": "#54A24B", "shared": "#9D755D", "dropped": "#D9D9D9", "padding": "#F0F0F0"}
STATUS_OPACITY = {"prompt": 0.35, "generated": 1.0, "dropped": 1.0, "padding": 1.0, "state": 0.8}
ROW_PX = 10  # height of one layer (its two tensor rows)
FRAME_PX = 130  # legend, boundary label, axis and its title: Streamlit fits the whole chart in its height
MAX_PLOT_PX = 270  # deeper models get thinner rows: the whole map stays under 400 px (a 1280 x 720 stage)
MIN_PLOT_PX = 120  # a model of few layers still gets rows tall enough to read


def shades_for(kinds: Sequence[CacheSpec], padded: bool = True) -> dict[str, str]:
    """The legend's entries: the tensors these kinds cache, then dropped (when a layer is capped)
    and padding (when sequences of a batch may be padded)."""
    names = dict.fromkeys(t for k in kinds for t in k.TENSORS)
    if any(k.cap_label for k in kinds):  # a sliding or chunked layer drops its older positions
        names["dropped"] = None
    if padded:
        names["padding"] = None
    return {name: SHADES[name] for name in names}


def map_height(num_layers: int) -> int:
    """The whole chart's height: the plot (capped for very deep models) plus its frame."""
    return max(MIN_PLOT_PX, min(MAX_PLOT_PX, num_layers * ROW_PX)) + FRAME_PX


def layer_axis(kinds: Sequence[CacheSpec]) -> alt.Axis:
    """Layer numbers; with mixed kinds each label also names its layer's kind ("3 · sliding 8")."""
    if uniform_label(kinds) is not None or not kinds:
        return alt.Axis(title="decoder layer", labelOverlap=True)
    labels = json.dumps([SAFE_LABEL.sub("", k.label()) for k in kinds])
    return alt.Axis(title="decoder layer · kind", labelLimit=200, labelOverlap=True,
                    labelExpr=f"datum.value + ' · ' + {labels}[datum.value]")


def _x(max_len: int, title: str | None) -> alt.X:
    scale = alt.Scale(domain=[0, max(max_len, 1)], nice=False, zero=True)
    return alt.X("pos_start:Q", title=title, scale=scale,
                 axis=alt.Axis(format="d", grid=False, tickCount=12, tickMinStep=1))


def _y(kinds: Sequence[CacheSpec]) -> alt.Y:
    scale = alt.Scale(domain=list(range(len(kinds))), paddingInner=0.2)
    return alt.Y("layer:O", scale=scale, axis=layer_axis(kinds))


def _boundary(prompt_len: int) -> list[alt.Chart]:
    """A rule where the prompt ends, labelled (constant per run, so its values are inline)."""
    base = alt.Chart(alt.InlineData(values=[{"pos_start": prompt_len, "label": "prompt | generated"}]))
    rule = base.mark_rule(color="#333333", strokeDash=[4, 3]).encode(x="pos_start:Q")
    text = base.mark_text(align="center", baseline="bottom", dy=-2, color="#333333").encode(
        x="pos_start:Q", y=alt.value(0), text="label:N")
    return [rule, text]


PICK = "picked_column"  # the point selection a click or a tap on a column makes (touch screens have no hover)
WHERE = ("datum.positions == 1 ? 'position ' + datum.pos_start : 'positions ' + datum.pos_start"
         " + '–' + (datum.pos_end - 1)")


def _pick() -> alt.Parameter:
    """A column picked by a click or a tap, cleared by a double click; none at first."""
    return alt.selection_point(name=PICK, on="click", fields=["pos_start"], empty=False, clear="dblclick")


def _columns_layer(pick: alt.Parameter) -> alt.Chart:
    """Invisible full-height rectangles, one per column, carrying the column's tooltip; the
    picked one is shaded."""
    return alt.Chart().transform_filter(alt.datum.row == "column").transform_calculate(
        where=WHERE).mark_rect(fill="#222222").encode(
        x="pos_start:Q", x2="pos_end:Q",
        opacity=alt.condition(pick, alt.value(0.25), alt.value(0.001)),
        tooltip=[alt.Tooltip("where:N", title="column"), alt.Tooltip("part:N", title="part"),
                 alt.Tooltip("text:N", title="text")]).add_params(pick)


def _picked_labels(pick: alt.Parameter, max_len: int) -> list[alt.Chart]:
    """The picked column's place and token, written at the top of the plot beside the column
    (left of it in the map's right half), on a white halo. The token travels only as data."""
    base = alt.Chart().transform_filter(alt.datum.row == "column").transform_filter(pick).transform_calculate(
        picked=f"({WHERE}) + ': ' + datum.text")
    layers = []
    for half, align, edge, dx in ((alt.datum.pos_start < max_len / 2, "left", "pos_end", 3),
                                  (alt.datum.pos_start >= max_len / 2, "right", "pos_start", -3)):
        side = base.transform_filter(half)
        for halo in (True, False):
            mark = dict(align=align, baseline="top", dx=dx, dy=2, fontSize=13, fontWeight="bold",
                        fill="#ffffff" if halo else "#111111", limit=360)
            if halo:
                mark |= dict(stroke="#ffffff", strokeWidth=4, strokeJoin="round")
            layers.append(side.mark_text(**mark).encode(x=f"{edge}:Q", y=alt.value(0), text="picked:N"))
    return layers


def cache_map_chart(df: pd.DataFrame, kinds: Sequence[CacheSpec], max_len: int,
                    prompt_len: int, padded: bool = True, hover: bool = True) -> alt.LayerChart:
    """Positions (x) × layers (y), two thin rows per layer (K over V, latent over rope key).

    Input (map_frame): row, layer, tensor_row, shade, status, pos_start, pos_end, positions, part,
    text. `padded`: whether the legend lists padding (a batch of several sequences); `hover`: the
    invisible columns carrying each column's text, which a click or a tap writes at the top of the
    plot (off for a static picture). Colour = what a cell holds; the prompt's cells are paler than generated ones; positions a
    sliding / chunked layer has dropped are grey. x domain [0, max_len] fixed, so a column
    appears per step in a still frame.
    """
    shades = shades_for(kinds, padded)
    opacity = alt.Opacity("status:N", legend=None, scale=alt.Scale(
        domain=list(STATUS_OPACITY), range=list(STATUS_OPACITY.values())))
    cells = alt.Chart().transform_filter(alt.datum.row == "cell").mark_rect().encode(
        x=_x(max_len, "token position"),  # "tap or hover a column": the caption under the map says it (a
        # longer title ran past a phone's edge)
        x2="pos_end:Q", y=_y(kinds),
        yOffset=alt.YOffset("tensor_row:O", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("shade:N", title="cache holds", scale=alt.Scale(
            domain=list(shades), range=list(shades.values())),
            legend=alt.Legend(orient="top", direction="horizontal", titleOrient="left")),
        opacity=opacity)
    pick = _pick()
    columns = [_columns_layer(pick), *_picked_labels(pick, max_len)] if hover else []
    return alt.layer(cells, *_boundary(prompt_len), *columns, data=df).properties(
        height=map_height(len(kinds)))


def attention_chart(df: pd.DataFrame, kinds: Sequence[CacheSpec], max_len: int,
                    prompt_len: int) -> alt.LayerChart:
    """The newest token's attention over the cached positions: layer × column, colour = share.

    Input columns (cache_map.attention_frame): layer, pos_start, pos_end, share, part, text.
    Colour on a square-root scale over [0, 1], so the small shares most positions get stay visible
    beside an "attention sink" near 1.
    """
    where = "'positions ' + datum.pos_start + '–' + (datum.pos_end - 1)"
    cells = alt.Chart().transform_calculate(where=where).mark_rect().encode(
        x=_x(max_len, "token position"), x2="pos_end:Q", y=_y(kinds),
        color=alt.Color("share:Q", title="attention", scale=alt.Scale(
            type="sqrt", domain=[0, 1], scheme="oranges"),
            legend=alt.Legend(format=".0%", orient="top", direction="horizontal", titleOrient="left",
                              gradientLength=240)),
        tooltip=["layer:O", alt.Tooltip("where:N", title="column"),
                 alt.Tooltip("share:Q", title="attention", format=".1%"), "part:N", "text:N"])
    return alt.layer(cells, *_boundary(prompt_len), data=df).properties(height=map_height(len(kinds)))
