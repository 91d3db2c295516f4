"""Pure Altair builders for the Capacity planner page: a DataFrame (kvviz/planner/frames.py)
plus scalars in, a chart out.

Imports altair, pandas and kvviz.viz.charts (itself altair + pandas) for the shared palette and
byte labels. The planner's charts are redrawn only when an input changes, so unlike the live
charts they need no fixed-chart / swap-the-data discipline.
"""
from __future__ import annotations

import altair as alt
import pandas as pd

# _bytes_axis: round KiB / MiB / GiB ticks; shared with the live charts rather than copied.
from kvviz.viz import export
from kvviz.viz.charts import (KIND_COLORS, MODE_COLORS, RULE_COLOR, SERIES_COLORS, _bytes_axis,
                          bytes_expr)

# The shared palette: blue, orange, green as in kvviz.viz.charts.
GROUP_COLORS = {"attention": KIND_COLORS["K"], "KV dtype": KIND_COLORS["V"],
                "sliding window": MODE_COLORS["cached"]}
CURVE_COLOR = SERIES_COLORS["measured"]
VLLM_COLOR = KIND_COLORS["V"]
PLAIN_LABEL = "plain bytes"
VLLM_LABEL = "as vLLM would allocate it (whole blocks)"
LABEL_COLOR = "#555555"


def _tokens_label(value: str) -> str:
    """Vega expression: 256 / 1K / 4K / 128K for a token count (K = 1,024, as in "128K context")."""
    return (f"{value} >= 1024 ? format({value} / 1024, '~g') + 'K' : format({value}, '~g')")


def _log_ticks(low: int, high: int) -> list[int]:
    """low, 4·low, 16·low … up to high, and high: one tick per quadrupling of the context."""
    ticks = [low]
    while ticks[-1] * 4 <= high:
        ticks.append(ticks[-1] * 4)
    return ticks if ticks[-1] == high else [*ticks, high]


LOG_Y_SPAN = 100  # counts spanning this factor or more get a log y axis


def _requests_axis(df: pd.DataFrame, folded: list[str]) -> alt.Y:
    """Whole-number ticks (never "0.000000" when nothing fits); a symlog scale where the counts span
    two decades or more, so a handful of requests at a long context do not read as zero."""
    values = pd.concat([df[c] for c in folded]).dropna() if len(df) else pd.Series(dtype=float)
    positive = values[values > 0]
    span = positive.max() / positive.min() if len(positive) else 1
    log = span >= LOG_Y_SPAN
    if not log:
        return alt.Y("requests:Q", title=["requests that fit at once", "(per replica)"],
                     scale=alt.Scale(zero=True), axis=alt.Axis(format=",d", tickMinStep=1))
    decades = [0] + [10 ** k for k in range(len(str(int(positive.max()))))]  # 0, 1, 10, 100, … ≤ max
    return alt.Y("requests:Q", title=["requests that fit at once", "(per replica, log scale)"],
                 scale=alt.Scale(type="symlog"), axis=alt.Axis(format=",d", values=decades))


CURVE_PLOT_PX = 240


def fit_curve_chart(df: pd.DataFrame, context_tokens: int | None = None,
                    min_tokens: int = 256, max_tokens: int | None = None) -> alt.LayerChart:
    """Requests that fit at once vs context per request, log x: the "quadruple the context,
    quarter the users" curve, with a dashed rule at the chosen context T.

    Input columns (planner_frames.fit_curve_frame): context_tokens, kv_bytes_per_request,
    max_concurrent_requests, and optionally vllm_requests_per_replica (a second, dashed line).
    x domain [min_tokens, max_tokens] (default: the frame's largest).
    """
    top = max_tokens or (int(df["context_tokens"].max()) if len(df) else 4 * min_tokens)
    x = alt.X("context_tokens:Q", title="context per request (tokens, log scale)",
              scale=alt.Scale(type="log", domain=[min_tokens, top], nice=False),
              axis=alt.Axis(values=_log_ticks(min_tokens, top), labelFlush=True,  # "128K" inside the edge
                            labelExpr=_tokens_label("datum.value")))
    folded = ["max_concurrent_requests"] + (
        ["vllm_requests_per_replica"] if "vllm_requests_per_replica" in df.columns
        and df["vllm_requests_per_replica"].notna().any() else [])
    line = alt.Chart().transform_fold(folded, as_=["series_key", "requests"]).transform_calculate(
        size=bytes_expr("datum.kv_bytes_per_request"),
        series=f"datum.series_key == 'max_concurrent_requests' ? '{PLAIN_LABEL}' : '{VLLM_LABEL}'",
    ).mark_line(point=alt.OverlayMarkDef(size=20), clip=True).encode(
        x=x,
        y=_requests_axis(df, folded),
        color=alt.Color("series:N", title=None, legend=alt.Legend(  # one entry a row: both fit a phone
            orient="top", labelLimit=0, direction="vertical"), scale=alt.Scale(
            domain=[PLAIN_LABEL, VLLM_LABEL], range=[CURVE_COLOR, VLLM_COLOR])),
        strokeDash=alt.StrokeDash("series:N", legend=None, scale=alt.Scale(
            domain=[PLAIN_LABEL, VLLM_LABEL], range=[[1, 0], [5, 3]])),
        tooltip=[alt.Tooltip("context_tokens:Q", title="context (tokens)", format=","),
                 alt.Tooltip("series:N", title="figure"),
                 alt.Tooltip("requests:Q", title="requests that fit", format=","),
                 alt.Tooltip("size:N", title="KV per request per GPU")],
    )
    layers = [line]
    if context_tokens:
        marker = alt.Chart(alt.InlineData(values=[
            {"context_tokens": context_tokens, "label": f"T = {context_tokens:,}"}]))
        right_half = context_tokens * context_tokens > min_tokens * top  # past the log middle
        layers += [
            marker.mark_rule(color=RULE_COLOR, strokeDash=[6, 4], strokeWidth=1.5).encode(
                x=alt.X("context_tokens:Q")),
            marker.mark_text(align="right" if right_half else "left", baseline="top",
                             dx=-4 if right_half else 4, y=4, color=LABEL_COLOR).encode(
                x=alt.X("context_tokens:Q"), text="label:N"),
        ]
    # The plot keeps CURVE_PLOT_PX and the chart grows around it (fit the width only): given no
    # height, its title, legend and axes in presenter mode's larger text left the plot no room.
    return alt.layer(*layers, data=df).properties(title=alt.Title(
        "Requests that fit vs context", subtitle="quadruple the context, quarter the users"),
        height=CURVE_PLOT_PX, autosize=alt.AutoSizeParams(type="fit-x", contains="padding"),
        padding={"right": 8})  # room for "128K", flush with the plot's end, in presenter mode's larger text


INSIDE_SHARE = 0.6  # a bar at least this share of the longest holds its value inside its end


def _value_labels(field: str, y: alt.Y, label_expr: str, top: float) -> list[alt.Chart]:
    """Each bar's value: after a short bar's end; inside a long bar's end (after it, the longest
    bars' values ran past a phone's edge), white on a solid bar, dark on a faded one."""
    base = alt.Chart().transform_calculate(value_label=label_expr.replace("datum.value", f"datum.{field}"))
    inside = f"datum.{field} >= {INSIDE_SHARE * top}"
    after = base.transform_filter(f"!({inside})").mark_text(align="left", dx=3, color=LABEL_COLOR)
    within = base.transform_filter(inside).mark_text(align="right", dx=-3).encode(
        color=alt.condition(alt.datum.current, alt.value("#ffffff"), alt.value("#222222")))
    return [mark.encode(x=f"{field}:Q", y=y, text="value_label:N") for mark in (after, within)]


def _what_if_bars(field: str, title: str, label_expr: str, axis: alt.Axis,
                  show_variants: bool, top: float) -> alt.LayerChart:
    y = alt.Y("variant:N", title=None, sort=alt.EncodingSortField("order", op="min"),
              axis=alt.Axis(labelLimit=260) if show_variants else None)
    bars = alt.Chart().mark_bar().encode(
        x=alt.X(f"{field}:Q", title=title, axis=axis),
        y=y,
        # the legend one entry a row: beside the 190 px variant labels a row of three ran past a phone's edge
        color=alt.Color("group:N", title="what-if", scale=alt.Scale(
            domain=list(GROUP_COLORS), range=list(GROUP_COLORS.values())),
            legend=alt.Legend(orient="bottom", direction="vertical")),
        opacity=alt.condition(alt.datum.current, alt.value(1.0), alt.value(0.5)),
        tooltip=["group:N", "variant:N", alt.Tooltip("kv_heads:Q", title="KV heads"),
                 "kv_dtype:N", alt.Tooltip("per_token:N", title="KV per token"),
                 alt.Tooltip("per_request:N", title="KV per request"),
                 alt.Tooltip("max_concurrent_requests:Q", title="requests that fit", format=",")],
    )
    return alt.layer(bars, *_value_labels(field, y, label_expr, top)).transform_calculate(
        per_token=bytes_expr("datum.kv_bytes_per_token"),
        per_request=bytes_expr("datum.kv_bytes_per_request"),
    )


def what_if_charts(df: pd.DataFrame, context_tokens: int) -> tuple[alt.LayerChart, alt.LayerChart]:
    """Horizontal bars per what-if variant: KV per request at T, and requests that fit, as two
    charts the page draws one above the other (side by side they needed 1,033 px and were cut at
    1280 wide; as one vconcat chart Streamlit does not refit them when the window narrows, and they
    ran 230 px past a phone's edge).

    Input columns (planner_frames.what_if_frame): group, variant, kv_heads, kv_dtype,
    kv_bytes_per_token, kv_bytes_per_request, max_concurrent_requests, current, order.
    Colour = group; the plan as configured is drawn solid, the alternatives faded.
    """
    top_bytes = int(df["kv_bytes_per_request"].max()) if len(df) else 0
    per_request = _what_if_bars(
        "kv_bytes_per_request", f"KV per request at {context_tokens:,} tokens",
        bytes_expr("datum.value"), _bytes_axis(top_bytes, tickCount=4), show_variants=True, top=top_bytes)
    fit = _what_if_bars(
        "max_concurrent_requests", f"requests that fit at {context_tokens:,} tokens",
        "format(datum.value, ',')", alt.Axis(format="~s", tickCount=4), show_variants=True,
        top=float(df["max_concurrent_requests"].max()) if len(df) else 0.0)
    return per_request.properties(data=df), fit.properties(data=df)


WHAT_IF_BARS_WIDTH = 460  # px per bar chart in the downloaded picture


def what_if_chart(df: pd.DataFrame, context_tokens: int) -> alt.VConcatChart:
    """Both what-if charts one above the other, as one picture (the downloads)."""
    per_request, fit = what_if_charts(df, context_tokens)
    return alt.vconcat(*(part.properties(data=alt.Undefined, width=WHAT_IF_BARS_WIDTH) for part in (per_request, fit)),
                       data=df, spacing=16)


# ---------------------------------------------------------------- downloads


def chart_svg(chart: alt.TopLevelMixin) -> str:
    """The chart as an SVG document (vl-convert, nothing fetched)."""
    return export.svg(chart.to_dict())


def chart_png(chart: alt.TopLevelMixin, scale: float = 2.0) -> bytes:
    """The chart as a PNG image at `scale` × its CSS size (vl-convert, nothing fetched)."""
    return export.png(chart.to_dict(), scale)
