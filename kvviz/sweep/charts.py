"""Pure Altair charts of a sweep: a `kvviz.sweep.compute.rows_frame` DataFrame plus scalars in, a chart out.

Input columns (rows_frame): prompt_tokens, batch, status ("ok", "oom", "skipped", "error"),
prefill_kv_bytes, end_kv_bytes, prefill_formula_bytes, end_formula_bytes, ttft_ms, itl_median_ms,
tokens_per_s, decode_bandwidth_bytes_per_s, peak_cuda_bytes, predicted_oom. Measured columns
are drawn from "ok" rows only. Prompt lengths sit on a log2 axis (sweeps double them); colour
is the batch size. No streamlit, no torch.
"""
from __future__ import annotations

import altair as alt
import pandas as pd

from kvviz.viz.charts import MODE_COLORS, STATE_COLORS, _rules, bytes_expr, power_of_two_ticks
from kvviz.core.errors import UserError

FORMULA_SERIES = "formula (the caption above)"  # short: a long label was cut at the chart edge at 1280 px
OOM_COLOR = MODE_COLORS["recompute"]  # the palette's red
NOT_RUN_COLOR = STATE_COLORS["free"]  # grey cells: the point has no measurement
BATCH_SCHEME = "tableau10"
FAILED_SHAPES = {"oom": "cross", "skipped": "triangle-down"}  # points with no measurement
GBS_EXPR = "format({v} / 1e9, ',.3~r') + ' GB/s'"
# Heatmap metrics: column -> (title, Vega expression formatting `{v}` for a cell's label).
METRICS = {
    "end_kv_bytes": ("KV cache at the end", bytes_expr("{v}")),
    "ttft_ms": ("time to first token", "format({v}, ',.1f') + ' ms'"),
    "itl_median_ms": ("median inter-token latency", "format({v}, ',.1f') + ' ms'"),
    "tokens_per_s": ("tokens/s (whole batch)", "format({v}, ',.1f')"),
    "decode_bandwidth_bytes_per_s": ("achieved bandwidth (decode)", GBS_EXPR),
    "peak_cuda_bytes": ("peak CUDA memory", bytes_expr("{v}")),
}


def no_boundary_note(device_name: str, kv_budget_bytes: int | None) -> str:
    """Why the cache chart has no out-of-memory line ("" where it has one): kvviz predicts the
    boundary from the device's memory size (kvviz.planner.capacity), which it reads on CUDA only."""
    if kv_budget_bytes is not None:
        return ""
    return (f"No out-of-memory boundary is drawn: kvviz reads a device's memory size only on CUDA, and on "
            f"{device_name} the cache shares the machine's RAM (and swap) with everything else it runs, so "
            "there is no fixed budget to predict from. A point that does run out is still marked with a "
            "cross; the Planner predicts the boundary for a GPU you pick.")


def metric_names(cuda: bool) -> list[str]:
    """The METRICS a device can fill: peak CUDA memory only on CUDA."""
    return [m for m in METRICS if cuda or m != "peak_cuda_bytes"]


def _prompt_x(df: pd.DataFrame) -> alt.X:
    """Log2 axis with a tick at every swept prompt length."""
    ticks = sorted({int(v) for v in df["prompt_tokens"].dropna()}) if len(df) else alt.Undefined
    return alt.X("prompt_tokens:Q", title="prompt tokens", scale=alt.Scale(type="log", base=2),
                 axis=alt.Axis(values=ticks, labelExpr="format(datum.value, ',')"))


def _batch_color() -> alt.Color:
    return alt.Color("batch:O", title="batch", scale=alt.Scale(scheme=BATCH_SCHEME))


def _ok() -> alt.Chart:
    return alt.Chart().transform_filter(alt.datum.status == "ok")


def _measured_lines(df: pd.DataFrame, y: alt.Y, tooltip: list) -> alt.Chart:
    """Points joined per batch, from the "ok" rows."""
    return _ok().mark_line(point=True).encode(
        x=_prompt_x(df), y=y, color=_batch_color(),
        tooltip=["prompt_tokens:Q", "batch:O", *tooltip])


def cache_bytes_chart(df: pd.DataFrame, budget_bytes: int | None = None) -> alt.LayerChart:
    """KV cache after the prefill vs prompt length: measured points, formula line (dashed), per
    batch; points that ran out of memory (or were skipped) as crosses at their formula bytes;
    with `budget_bytes`, a rule where the cache must fit on the device (the predicted boundary).
    Log-log axes: a cache linear in tokens is a straight line.
    """
    shown = [*df.get("prefill_kv_bytes", []), *df.get("prefill_formula_bytes", []), budget_bytes or 0]
    ticks = power_of_two_ticks(shown)  # 1, 2, 4, 8 MiB: never Vega's 977 KiB / 4.77 MiB
    y = alt.Y("bytes:Q", title="KV cache after prefill",
              scale=alt.Scale(type="log", base=2, **({"domain": [ticks[0], ticks[-1]]} if ticks else {})),
              axis=alt.Axis(labelExpr=bytes_expr("datum.value"), **({"values": ticks} if ticks else {})))
    formula = alt.Chart().transform_calculate(
        bytes="datum.prefill_formula_bytes", source=f"'{FORMULA_SERIES}'",
    ).mark_line(strokeWidth=1.5).encode(
        x=_prompt_x(df), y=y, color=_batch_color(), strokeDash=_formula_dash())
    measured = _ok().transform_calculate(
        bytes="datum.prefill_kv_bytes", size=bytes_expr("datum.prefill_kv_bytes"),
        formula=bytes_expr("datum.prefill_formula_bytes"),
    ).mark_point(filled=True, size=70).encode(
        x=_prompt_x(df), y=y, color=_batch_color(),
        tooltip=["prompt_tokens:Q", "batch:O", alt.Tooltip("size:N", title="measured"),
                 alt.Tooltip("formula:N", title="formula")])
    failed = [s for s in FAILED_SHAPES if s in set(df["status"])] if len(df) else []
    budget = [{"label": "predicted out of memory: cache budget", "bytes": budget_bytes}]
    layers = [formula, measured, *([_failed_marks(df, y, failed)] if failed else []),
              *(_rules(budget) if budget_bytes else [])]
    return alt.layer(*layers, data=df).resolve_scale(shape="independent")


def _formula_dash() -> alt.StrokeDash:
    """The formula lines' legend entry: a dashed stroke, below the plot."""
    return alt.StrokeDash("source:N", title=None, scale=alt.Scale(domain=[FORMULA_SERIES], range=[[6, 4]]),
                          legend=alt.Legend(orient="bottom", symbolType="stroke", symbolStrokeColor="#555555",
                                            symbolStrokeWidth=2, labelLimit=600))


def _failed_marks(df: pd.DataFrame, y: alt.Y, statuses: list[str]) -> alt.Chart:
    """Crosses (out of memory) and triangles (skipped) at the formula bytes of those points."""
    return alt.Chart().transform_filter(
        alt.FieldOneOfPredicate(field="status", oneOf=statuses),
    ).transform_calculate(bytes="datum.prefill_formula_bytes").mark_point(
        size=140, strokeWidth=2.5, color=OOM_COLOR,
    ).encode(x=_prompt_x(df), y=y,
             shape=alt.Shape("status:N", title="no measurement", scale=alt.Scale(
                 domain=statuses, range=[FAILED_SHAPES[s] for s in statuses])),
             tooltip=["prompt_tokens:Q", "batch:O", "status:N", "message:N"])


def ttft_chart(df: pd.DataFrame) -> alt.Chart:
    """Time to first token (the prefill) vs prompt length, one line per batch: prefill grows."""
    return _measured_lines(df, alt.Y("ttft_ms:Q", title="time to first token (ms)"),
                           [alt.Tooltip("ttft_ms:Q", format=",.1f")]).properties(data=df)


def itl_chart(df: pd.DataFrame) -> alt.Chart:
    """Median inter-token latency vs context (the prompt the decode steps attend to), per batch:
    flat while weights dominate each step, rising once the cache read does."""
    y = alt.Y("itl_median_ms:Q", title="median inter-token latency (ms)", scale=alt.Scale(zero=True))
    return _measured_lines(df, y, [alt.Tooltip("itl_median_ms:Q", format=",.1f")]).properties(data=df)


def heatmap_chart(df: pd.DataFrame, metric: str) -> alt.LayerChart:
    """Prompt × batch grid coloured by `metric` (a METRICS key), each cell labelled; cells
    without a measurement grey and labelled with their status; cells the capacity formula
    predicts will not fit (predicted_oom) outlined in red, dashed."""
    if metric not in METRICS:
        raise UserError(f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")
    base = alt.Chart().encode(
        x=alt.X("prompt_tokens:O", title="prompt tokens", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("batch:O", title="batch", sort="descending"))
    measured = f"datum.status == 'ok' && isValid(datum.{metric})"
    empty = base.transform_filter(f"!({measured})").mark_rect(color=NOT_RUN_COLOR).encode(
        tooltip=["prompt_tokens:O", "batch:O", "status:N", "message:N"])
    predicted = base.transform_filter("datum.predicted_oom == true").mark_rect(
        fill=None, stroke=OOM_COLOR, strokeDash=[4, 3], strokeWidth=2)
    text = base.mark_text(color="#222222").encode(text="label:N")
    return alt.layer(_heat_cells(base.transform_filter(measured), metric), empty, predicted, text,
                     data=df).transform_calculate(label=_cell_label(metric))


def _heat_cells(base: alt.Chart, metric: str) -> alt.Chart:
    title, fmt = METRICS[metric]
    scale = alt.Scale(scheme={"name": "blues", "extent": [0.05, 0.65]})  # light: labels stay legible
    return base.mark_rect().encode(
        color=alt.Color(f"{metric}:Q", title=title, scale=scale,
                        legend=alt.Legend(labelExpr=fmt.format(v="datum.value"))),
        tooltip=["prompt_tokens:O", "batch:O", alt.Tooltip("label:N", title=title)])


def _cell_label(metric: str) -> str:
    """Vega expression: the formatted value, the status in capitals, or 'n/a' (no value)."""
    value = METRICS[metric][1].format(v=f"datum.{metric}")
    return (f"datum.status != 'ok' ? upper(datum.status) : "
            f"isValid(datum.{metric}) ? ({value}) : 'n/a'")


def bandwidth_chart(df: pd.DataFrame, peak_bytes_per_s: float | None = None,
                    peak_label: str = "peak") -> alt.LayerChart:
    """Where the time goes: achieved bandwidth of the decode steps, (weights + cache read) / step
    time (median per point), vs prompt length per batch, under the device's peak (a rule)."""
    axis = alt.Axis(labelExpr=GBS_EXPR.format(v="datum.value"), tickCount=6)
    y = alt.Y("decode_bandwidth_bytes_per_s:Q", title="achieved bandwidth (decode)",
              scale=alt.Scale(type="log"), axis=axis)
    lines = _measured_lines(df, y, [alt.Tooltip("bandwidth:N", title="achieved")])
    lines = lines.transform_calculate(bandwidth=GBS_EXPR.format(v="datum.decode_bandwidth_bytes_per_s"))
    if not peak_bytes_per_s:
        return alt.layer(lines, data=df)
    label = f"{peak_label}: {peak_bytes_per_s / 1e9:,.0f} GB/s"
    return alt.layer(lines, *_rules([{"label": label, "bytes": peak_bytes_per_s}]), data=df)
