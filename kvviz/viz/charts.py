"""Pure Altair chart builders: a long-form DataFrame (kvviz/live/frames.py) plus scalars in, a chart out.

One builder per chart; each docstring lists its input columns. No streamlit, no torch.

Live updates: build once, swap only the data. Every builder puts its DataFrame at the top level
of the chart (sub-layers inherit it; constant overlays such as labelled rules carry their own
inline values), and axis domains that would follow the data are parameters (`max_*`) fixed for
a run, so marks grow inside a still frame. A page builds each chart once per run, then per
refresh (verified in Chromium against Streamlit 1.67: the chart's canvas element survives every
update while its pixels change; a chart whose Vega-Lite dict changes is re-embedded instead):

    vega = to_vega_lite(race_chart(steps_frame([]), max_tokens=256))   # once, a few ms
    placeholder.vega_lite_chart(vega_lite_with_data(vega, df))          # per refresh, ~1-4 ms

or, simpler but slower (Altair re-validates the whole chart on every call, ~5-35 ms):

    placeholder.altair_chart(with_data(chart, df))

Both work because Streamlit's frontend keys the Vega view on the Vega-Lite dict with dataset names
replaced by their position, so a new DataFrame (even under a new content-hash name) is pushed
into the existing view: no re-embed, no flicker. Changing any scalar parameter changes the
Vega-Lite dict and re-creates the view: do that between runs, not per token. (The frontend also
re-embeds once when an untransformed mark passes 2,000 point/bar/rect or 5,000 line rows, to
switch renderer; these charts' marks either carry transforms, which it does not count, or stay
far below that.)
"""
from __future__ import annotations

import json
import math

import altair as alt
import pandas as pd
import pyarrow as pa

# One calm palette for every chart.
KIND_COLORS = {"K": "#4C78A8", "V": "#F58518", "state": "#54A24B"}  # keys blue, values orange
MODE_COLORS = {"cached": "#54A24B", "recompute": "#E45756"}  # fast green, slow red
STATE_COLORS = {"full": "#4C78A8", "partial": "#9ECAE9", "free": "#E4E4E4"}
PART_COLORS = {"used": "#4C78A8", "unused": "#D5D5D5"}
SERIES_COLORS = {"measured": "#4C78A8", "formula": "#333333"}
RULE_COLOR = "#888888"
LAYOUTS = ["paged (modelled)", "contiguous max-length"]  # kvviz.live.frames.LAYOUT_*
TABLE = "table"  # name of the main dataset in a Vega-Lite dict from to_vega_lite
BYTE_UNITS = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B")]


def bytes_expr(value: str) -> str:
    """Vega expression rendering the byte count `value` as B / KiB / MiB / GiB text."""
    expr = f"format({value}, ',') + ' B'"
    for size, unit in reversed(BYTE_UNITS[:-1]):
        expr = f"{value} >= {size} ? format({value} / {size}, '.3~r') + ' {unit}' : {expr}"
    return expr


def power_of_two_ticks(values, max_ticks: int = 7) -> list[int]:
    """Round byte ticks for a log axis: powers of two (…, 512 KiB, 1 MiB, 2 MiB, …) spanning
    `values` (positive numbers; others ignored), every second or fourth power when more than
    `max_ticks` would crowd the axis. Vega's own log ticks are powers of ten: 977 KiB, 4.77 MiB."""
    positive = [float(v) for v in values if pd.notna(v) and float(v) > 0]
    if not positive:
        return []
    lo, hi = int(math.floor(math.log2(min(positive)))), int(math.ceil(math.log2(max(positive))))
    step = 1
    while len(range(lo - lo % step, hi + step, step)) > max_ticks:
        step *= 2
    return [2 ** k for k in range(lo - lo % step, hi + step, step)]


def with_data(chart: alt.TopLevelMixin, df: pd.DataFrame) -> alt.TopLevelMixin:
    """The same chart over new rows, for `st.altair_chart` (see module doc)."""
    return chart.properties(data=df)


def to_vega_lite(chart: alt.TopLevelMixin) -> dict:
    """The chart as a Vega-Lite dict whose main data is the named slot TABLE; build it once.

    Overlays' own inline values stay in vega["datasets"]. Like st.altair_chart, leaves out the
    300 x 300 view size Altair's default theme adds, so Streamlit sizes the chart. Altair's
    validation against the Vega-Lite schema is left to the tests (tests/viz/test_charts.py): it
    took most of the build, on the script thread while the model ran its first steps.
    """
    vega = chart.properties(data=alt.Data(name=TABLE)).to_dict(validate=False)
    if alt.theme.active == "default":
        view = vega.get("config", {}).get("view", {})
        for key in ("continuousWidth", "continuousHeight"):
            view.pop(key, None)
    return vega


def vega_lite_with_data(vega: dict, df: pd.DataFrame) -> dict:
    """`vega` (from to_vega_lite) with `df` as its main data: the per-refresh update, ~1 ms.

    Only the columns the chart can read travel (`columns_read`), as an Arrow table (`arrow_table`):
    Streamlit converts a frame to Arrow on the script thread, while the model waits for the
    interpreter, and the frames of the Live page carry 16 columns where its charts read 2 to 6.
    Shallow: the result shares all but its "datasets" with `vega`; neither is mutated.
    """
    return {**vega, "datasets": {**vega.get("datasets", {}), TABLE: arrow_table(df, columns_read(vega, tuple(df.columns)))}}


def arrow_table(df: pd.DataFrame, columns: tuple) -> pa.Table | pd.DataFrame:
    """`df`'s `columns` as the Arrow table Streamlit would make of them (the same types, no index),
    built column by column: a third of the time of `pa.Table.from_pandas`, whose per-frame
    bookkeeping was most of a chart's update. A column Arrow cannot type alone (mixed objects)
    leaves the frame to Streamlit, whose conversion repairs such columns."""
    try:
        return pa.Table.from_arrays([pa.array(df[c]) for c in columns], names=[str(c) for c in columns])
    except (pa.ArrowException, TypeError, ValueError):
        return df[list(columns)]


_READ: dict[int, tuple[dict, tuple, tuple]] = {}  # id(vega) -> (vega, the frame's columns, those read)


def columns_read(vega: dict, columns: tuple) -> tuple:
    """Of `columns`, those named anywhere in the chart's Vega-Lite dict, its datasets aside (as a
    field, in an expression, a tooltip, a fold): the only ones it can read. Kept per chart dict,
    which a page builds once per run and feeds every frame."""
    known = _READ.get(id(vega))
    if known is not None and known[0] is vega and known[1] == columns:
        return known[2]
    text = json.dumps({k: v for k, v in vega.items() if k != "datasets"}, default=str)
    read = tuple(c for c in columns if isinstance(c, str) and c in text)
    if len(_READ) > 256:
        _READ.clear()
    _READ[id(vega)] = (vega, columns, read)
    return read


# Streamlit's chart theme sizes (px) for each kind of chart text; presenter mode scales them all.
FONT_PX = {("axis", "labelFontSize"): 12, ("axis", "titleFontSize"): 12, ("legend", "labelFontSize"): 14,
           ("legend", "titleFontSize"): 14, ("header", "labelFontSize"): 12, ("header", "titleFontSize"): 14,
           ("title", "fontSize"): 16, ("text", "fontSize"): 11}


PHONE_PX = 700  # a window narrower than this is a phone: chart text keeps its usual size even on stage
LEGEND_LABEL_LIMIT_PX = 160  # Vega's default legend label limit, scaled with the text on stage


def _on_screen(px: int, scale: float) -> dict:
    """`px` scaled on a window at least PHONE_PX wide, as is on a narrower one (a Vega expression,
    evaluated when the chart is embedded: a window narrowed afterwards keeps the sizes it had)."""
    return {"expr": f"windowSize()[0] < {PHONE_PX} ? {px} : {round(px * scale)}"}


def with_font_scale(vega: dict, scale: float) -> dict:
    """`vega` with every chart text `scale` times its usual size (presenter mode), as config;
    label limits grow with the text. On a phone-wide window (under PHONE_PX) the sizes stay as
    they are: the enlarged text is for a projector and ran past a phone's chart edges.

    Text marks that set their own fontSize keep it. Shallow: `vega` is not mutated.
    """
    if scale == 1:
        return vega
    config = dict(vega.get("config", {}))
    for (part, key), px in FONT_PX.items():
        config[part] = {**config.get(part, {}), key: _on_screen(px, scale)}
    config["axis"] = {**config["axis"], "labelLimit": _on_screen(180, scale)}
    config["legend"] = {**config["legend"], "labelLimit": _on_screen(LEGEND_LABEL_LIMIT_PX, scale)}
    return {**vega, "config": config}


def _nice_step(span: float, ticks: int = 5) -> float:
    """The 1, 2 or 5 x 10^k step that cuts `span` into closest to `ticks` intervals."""
    power = 1.0
    while power * 10 <= span / ticks:
        power *= 10
    while power > span / ticks:
        power /= 10
    return min((m * power for m in (1, 2, 5, 10)), key=lambda step: abs(span / step - ticks))


def _bytes_axis(max_bytes: float | None = None, **kwargs) -> alt.Axis:
    """Byte-valued axis. Given the domain's top, ticks fall on round KiB / MiB / GiB values."""
    if not max_bytes:
        return alt.Axis(labelExpr=bytes_expr("datum.value"), **kwargs)
    size, unit = next((s, u) for s, u in BYTE_UNITS if max_bytes >= s or s == 1)
    step = _nice_step(max_bytes / size)
    values = [i * step * size for i in range(int(max_bytes / size / step) + 1)]
    label = f"datum.value == 0 ? '0' : format(datum.value / {size}, '~g') + ' {unit}'"
    return alt.Axis(values=values, labelExpr=label, **kwargs)


def _color(field: str, colors: dict[str, str], title: str, **kwargs) -> alt.Color:
    scale = alt.Scale(domain=list(colors), range=list(colors.values()))
    return alt.Color(field, scale=scale, title=title, **kwargs)


def _domain(low: float, high: float | None) -> alt.Scale:
    """A fixed [low, high] scale when `high` is given, else a data-driven one."""
    return alt.Scale() if high is None else alt.Scale(domain=[low, high], nice=False)


def layer_groups_chart(df: pd.DataFrame, max_bytes: int, groups: list[str],
                       tensors: tuple[str, ...] = ("K", "V")) -> alt.LayerChart:
    """Bytes one layer of each kind holds (K, V, state side by side), one group per layer kind.

    Input columns (live_charts.layer_groups_frame): group, kind ("K"/"V"/"state"), kv_bytes (one
    layer), tokens, layers, group_bytes, cap_bytes (the layer's bytes at its window / chunk, null
    when it has none), cap_label. `groups` fixes the x axis ("all 30 layers · full", or
    "10 layers · full", "50 layers · sliding 1024"...); max_bytes fixes the y axis (one tensor of
    the widest layer at max length); `tensors` the bars per group (K, V, and state for models
    with state layers). A uniform model is one group: its layers are all alike.
    """
    x = alt.X("group:N", title=None, sort=groups,
              scale=alt.Scale(domain=groups, paddingInner=0.3, paddingOuter=0.5),
              axis=alt.Axis(labelAngle=0, labelLimit=260))
    offset = alt.XOffset("kind:N", scale=alt.Scale(domain=list(tensors)))
    y = alt.Y("kv_bytes:Q", title="bytes held by one layer", scale=_domain(0, max_bytes),
              axis=_bytes_axis(max_bytes))
    bars = alt.Chart().mark_bar(clip=True).transform_calculate(
        size=bytes_expr("datum.kv_bytes"), total=bytes_expr("datum.group_bytes"),
    ).encode(x=x, xOffset=offset, y=y, color=_color("kind:N", {t: KIND_COLORS[t] for t in tensors}, "tensor"), tooltip=[
        "group:N", "kind:N", alt.Tooltip("size:N", title="one layer"),
        alt.Tooltip("tokens:Q", title="tokens held"), alt.Tooltip("total:N", title="all layers of the group")])
    cap = alt.Chart().transform_filter("isValid(datum.cap_bytes)").encode(
        x=x, xOffset=offset, y=alt.Y("cap_bytes:Q"))
    ticks = cap.mark_tick(color="#333333", thickness=2, clip=True)
    labels = cap.transform_filter(alt.datum.kind == "K").mark_text(
        align="left", baseline="bottom", dy=-3, color="#333333", clip=True).encode(text="cap_label:N")
    return alt.layer(bars, ticks, labels, data=df)


def _rules(values: list[dict]) -> list[alt.Chart]:
    """Horizontal rules at `bytes`, each labelled with `label` at the left edge."""
    base = alt.Chart(alt.InlineData(values=values)).encode(y="bytes:Q")
    rule = base.mark_rule(color=RULE_COLOR, strokeWidth=1.5)
    text = base.mark_text(align="left", baseline="bottom", dx=4, dy=-3, color="#555555")
    return [rule, text.encode(x=alt.value(0), text="label:N")]


def total_cache_chart(
    steps_df: pd.DataFrame,
    weight_bytes: int,
    contiguous_bytes: int,
    max_seq_len: int | None = None,
    max_bytes: int | None = None,
) -> alt.LayerChart:
    """Whole cache vs tokens: measured (solid) and formula (dashed), with reference rules.

    Input columns (frames.steps_frame): mode, seq_len, kv_bytes, formula_bytes (only rows with
    mode "cached" are drawn). Rules mark the model weights and the contiguous max-length
    reservation (a rule is left out when its bytes are 0). x domain [0, max_seq_len] when
    given; y domain [0, max_bytes], by default 1.08 x the larger rule.
    """
    top = max_bytes or int(1.08 * max(weight_bytes, contiguous_bytes)) or None
    x = alt.X("seq_len:Q", title="tokens per sequence", scale=_domain(0, max_seq_len))
    y = alt.Y("bytes:Q", title="KV cache", scale=_domain(0, top), axis=_bytes_axis(top))
    # the legend below: beside the plot, on a phone on stage, the rules' labels ran into it
    color = _color("series:N", SERIES_COLORS, "cache", legend=alt.Legend(orient="bottom", direction="horizontal"))
    # Two layers, so the dashed formula is drawn over the (equal) measured line, not hidden by it.
    lines = [alt.Chart().transform_filter(alt.datum.mode == "cached").transform_calculate(
        bytes=f"datum.{field}", series=f"'{series}'", size=bytes_expr(f"datum.{field}"),
    ).mark_line(clip=True, strokeWidth=width, strokeDash=dash).encode(
        x=x, y=y, color=color,
        tooltip=["seq_len:Q", "series:N", alt.Tooltip("size:N", title="bytes")],
    ) for field, series, width, dash in (("kv_bytes", "measured", 5, [1, 0]),
                                         ("formula_bytes", "formula", 1.5, [6, 4]))]
    refs = [{"label": "model weights", "bytes": weight_bytes},
            {"label": "contiguous reservation", "bytes": contiguous_bytes}]
    refs = [r for r in refs if r["bytes"]]
    return alt.layer(*lines, *(_rules(refs) if refs else []), data=steps_df)


def block_grid_chart(grid_df: pd.DataFrame, columns: int = 32) -> alt.Chart:
    """The block pool as a grid, `columns` blocks per row, coloured full / partial / free.

    Input columns (frames.block_grid_frame): block, seq, slot_fill, state.
    """
    return alt.Chart(grid_df).transform_calculate(
        col=f"datum.block % {columns}", row=f"floor(datum.block / {columns})",
    ).mark_rect(stroke="white", strokeWidth=1).encode(
        x=alt.X("col:O", axis=None),
        y=alt.Y("row:O", axis=None),
        color=_color("state:N", STATE_COLORS, "block",
                     legend=alt.Legend(orient="bottom", direction="horizontal")),
        tooltip=["block:Q", alt.Tooltip("seq:Q", title="sequence (-1 free)"),
                 alt.Tooltip("slot_fill:Q", title="filled slots"), "state:N"],
    ).properties(height=alt.Step(18))


ROW_STEP_PX = 46  # the blocks chart's rows: its label on top, its bar below (presenter mode's 1.5x text fits)
BAR_PX = 14  # each bar's thickness


def reservation_chart(res_df: pd.DataFrame, max_bytes: int | None = None) -> alt.LayerChart:
    """Used vs reserved-but-unused bytes per layout, as horizontal stacked bars.

    Input columns (frames.reservation_frame): layout, part ("used"/"unused"), bytes,
    wasted_fraction, and optionally unused_label (kvviz.live.charts.reservation_data: the
    caption's own "NN% unused"; without it Vega formats wasted_fraction). Each row is
    ROW_STEP_PX high whatever the chart's width or text size: its label ("paged (modelled): 5%
    unused") written on top, from the left edge, and its bar below. The chart's height follows
    from its rows, its axis and its legend; give it no fixed height (a fixed 130 px left the bars
    no room: they collapsed into one hairline with both labels printed over each other). x domain:
    [0, max_bytes], by default the largest reservation in res_df (stable across a run: the
    contiguous reservation does not change).
    """
    if max_bytes is None and len(res_df):
        max_bytes = int(res_df.groupby("layout")["bytes"].sum().max())
    y = alt.Y("layout:N", title=None, sort=LAYOUTS, axis=None, scale=alt.Scale(paddingInner=0, paddingOuter=0))
    bars = alt.Chart().transform_calculate(size=bytes_expr("datum.bytes")).mark_bar(
        size=BAR_PX, yOffset=ROW_STEP_PX / 2 - BAR_PX / 2 - 4,
    ).encode(
        x=alt.X("bytes:Q", title="bytes reserved", stack="zero", scale=_domain(0, max_bytes or None),
                axis=_bytes_axis(max_bytes or None)),
        y=y,
        color=_color("part:N", PART_COLORS, "bytes", legend=alt.Legend(orient="bottom", direction="horizontal")),
        order=alt.Order("part_rank:Q"),
        tooltip=["layout:N", "part:N", alt.Tooltip("size:N", title="bytes")],
    ).transform_calculate(part_rank="datum.part == 'used' ? 0 : 1")
    labelled = "unused_label" in res_df.columns
    labels = alt.Chart().transform_aggregate(
        total="sum(bytes)", wasted="max(wasted_fraction)", groupby=["layout", "unused_label"] if labelled else ["layout"],
    ).transform_calculate(
        label="datum.unused_label" if labelled else "format(datum.wasted, '.0%') + ' unused'",
    ).transform_calculate(row="datum.layout + ': ' + datum.label").mark_text(
        align="left", baseline="top", dy=4, color="#555555",
    ).encode(x=alt.value(0), y=alt.Y("layout:N", sort=LAYOUTS, bandPosition=0), text="row:N",
             tooltip=["layout:N", alt.Tooltip("total:Q", title="total"), "label:N"])  # "total: 57344", read by tests
    return alt.layer(bars, labels, data=res_df).properties(height=alt.Step(ROW_STEP_PX))


def step_time_chart(
    steps_df: pd.DataFrame,
    max_step: int | None = None,
    max_ms: float | None = None,
    log_scale: bool = False,
) -> alt.LayerChart:
    """Time of every forward pass: decode steps as a line, the prefill as a diamond.

    Input columns (frames.steps_frame): mode, phase, step, step_ms. Colour = mode, so cached and
    recompute runs share the chart. Fixed domains x [0, max_step], y [0, max_ms] when given;
    log_scale puts step_ms on a log axis (the prefill can dwarf decode steps).
    """
    y_scale = alt.Scale(type="log") if log_scale else _domain(0, max_ms)
    base = alt.Chart().encode(
        x=alt.X("step:Q", title="step (0 = prefill)", scale=_domain(0, max_step)),
        y=alt.Y("step_ms:Q", title="step time (ms)", scale=y_scale),
        color=_color("mode:N", MODE_COLORS, "mode"),
        tooltip=["mode:N", "phase:N", "step:Q", alt.Tooltip("step_ms:Q", format=",.1f")],
    )
    decode = base.transform_filter(alt.datum.phase == "decode").mark_line(clip=True)
    prefill = base.transform_filter(alt.datum.phase == "prefill").mark_point(
        filled=True, size=140,
    ).encode(shape=alt.Shape("phase:N", title=None, scale=alt.Scale(
        domain=["prefill"], range=["diamond"])))
    return alt.layer(decode, prefill, data=steps_df)


def layer_time_chart(
    layer_times_df: pd.DataFrame,
    mode: str | None = None,
    include_prefill: bool = False,
    max_step: int | None = None,
    max_ms: float | None = None,
) -> alt.Chart:
    """Heatmap of each layer's forward time per step (x = step, y = layer, colour = ms).

    Input columns (frames.layer_times_frame): mode, step, phase, layer, forward_ms.
    Draws the rows of `mode` only (give it when the frame holds both modes: their cells would
    overlap) and, by default, decode steps only: the prefill's far longer column would wash out
    the colours.
    Fixed domains: x [0, max_step + 1], colour [0, max_ms] when given.
    """
    chart = alt.Chart(layer_times_df)
    if mode is not None:
        chart = chart.transform_filter(alt.datum.mode == mode)
    if not include_prefill:
        chart = chart.transform_filter(alt.datum.phase == "decode")
    x_top = None if max_step is None else max_step + 1
    return chart.transform_calculate(step_end="datum.step + 1").mark_rect(clip=True).encode(
        x=alt.X("step:Q", title="step", scale=_domain(0, x_top)),
        x2="step_end:Q",
        y=alt.Y("layer:O", title="decoder layer"),
        color=alt.Color("forward_ms:Q", title="layer time (ms)", scale=alt.Scale(
            scheme="blues", domain=[0, max_ms] if max_ms else alt.Undefined)),
        tooltip=["mode:N", "step:Q", "layer:O", alt.Tooltip("forward_ms:Q", format=",.2f")],
    )


MEASURED = "datum.series !== 'modelled' && datum.series !== 'axis'"  # rows without a series are measured


def _dash(label: str) -> alt.StrokeDash:
    """Solid for "measured", dashed for `label`, in a legend of its own that lists only what the
    data holds (the order, not a fixed domain, picks the dash: a run whose no-cache side finished
    shows no `label` entry)."""
    return alt.StrokeDash("shown:N", title=None, sort=["measured", label], scale=alt.Scale(range=[[1, 0], [6, 4]]),
                          legend=alt.Legend(symbolType="stroke", symbolSize=500, symbolStrokeWidth=2))


def _mode_lines(x: alt.X, y: alt.Y, tooltip: list, label: str) -> alt.LayerChart:
    """The measured steps: a solid line per mode ("measured" in the dash legend) with a point at each step."""
    base = alt.Chart().transform_filter(MEASURED).encode(x=x, y=y, color=_color("mode:N", MODE_COLORS, "mode"),
                                                         tooltip=["mode:N", *tooltip])
    lines = base.transform_calculate(shown="'measured'").mark_line(clip=True).encode(strokeDash=_dash(label))
    return alt.layer(lines, base.mark_point(size=18, filled=True, opacity=1, clip=True))


def _remainder(x: alt.X, y: alt.Y, label: str, tooltip: list) -> alt.Chart:
    """The unfinished no-cache run's remainder (rows of series "modelled"): a dashed line in its
    colour, without points (nothing there was measured), named `label` in the dash legend beside
    the solid "measured" lines."""
    return alt.Chart().transform_filter("datum.series === 'modelled'").transform_calculate(
        shown=f"'{label}'").mark_line(clip=True).encode(
        x=x, y=y, color=_color("mode:N", MODE_COLORS, "mode"), strokeDash=_dash(label),
        tooltip=["mode:N", alt.Tooltip("shown:N", title="series"), *tooltip])


def _axis_end(x: alt.X, y_field: str) -> alt.Chart:
    """An invisible mark at the "axis" row: the x axis ends there (a data-driven domain)."""
    return alt.Chart().transform_filter("datum.series === 'axis'").mark_point(opacity=0).encode(
        x=x, y=alt.Y(f"{y_field}:Q"))


def _tokens_x(max_tokens: int | None) -> alt.X:
    """Tokens generated: [0, max_tokens] when given; else from 0 to the frame's largest
    new_tokens, the "axis" row included, unrounded (the axis ends at the last token)."""
    scale = _domain(0, max_tokens) if max_tokens else alt.Scale(domainMin=0, nice=False)
    return alt.X("new_tokens:Q", title="tokens generated", scale=scale)


def race_chart(
    steps_df: pd.DataFrame, max_tokens: int | None = None, max_ms: float | None = None,
) -> alt.LayerChart:
    """Cached vs recompute race: time since the start vs tokens generated, one line per mode.

    Input columns (frames.steps_frame): mode, new_tokens, elapsed_ms; optionally series
    (kvviz.live.charts.race_data): "modelled" rows draw the unfinished no-cache run's remainder,
    dashed and labelled modelled, and an "axis" row sets where the x axis ends. Fixed domains
    x [0, max_tokens], y [0, max_ms] when given; y labelled in seconds.
    """
    seconds = alt.Axis(labelExpr="format(datum.value / 1000, '~g') + ' s'")
    x = _tokens_x(max_tokens)
    y = alt.Y("elapsed_ms:Q", title="time since start", scale=_domain(0, max_ms), axis=seconds)
    tooltip = ["new_tokens:Q", alt.Tooltip("elapsed_ms:Q", format=",.0f")]
    return alt.layer(_mode_lines(x, y, tooltip, "modelled"), _remainder(x, y, "modelled", tooltip),
                     _axis_end(x, "elapsed_ms"), data=steps_df)


def positions_chart(
    steps_df: pd.DataFrame, max_tokens: int | None = None, max_positions: int | None = None,
) -> alt.LayerChart:
    """Token positions processed so far vs tokens generated: ~n for cached, ~n²/2 recomputed.

    Input columns (frames.steps_frame): mode, new_tokens, positions_total; optionally series, as
    race_chart (the remainder's positions are counted, not run: labelled so). Fixed domains
    x [0, max_tokens], y [0, max_positions] when given.
    """
    x = _tokens_x(max_tokens)
    # two lines: on one, the title ran past a 220 px chart's top edge
    y = alt.Y("positions_total:Q", title=["positions processed", "(total)"], scale=_domain(0, max_positions))
    tooltip = ["new_tokens:Q", alt.Tooltip("positions_total:Q", format=",")]
    return alt.layer(_mode_lines(x, y, tooltip, "counted, not run"), _remainder(x, y, "counted, not run", tooltip),
                     _axis_end(x, "positions_total"), data=steps_df)
