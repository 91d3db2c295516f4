"""Pure frames and Altair charts of the quality sweep (kvviz.shrink.sweep): accuracy with its 95 %
interval for every press at each share of the context it evicts, beside the full cache's band; the
quantized caches on their own axis, bits per value; accuracy per task format; each item's answer.

Columns: sweep_frame -> curve, short, kind, mode, ratio, accuracy, lo, hi, right, items, bytes,
bytes_mib, kept_share, nbits, bits, backend, question_aware, step_ratio, step_ratio_lo,
step_ratio_hi, timed_steps.
"""
from __future__ import annotations

import altair as alt
import pandas as pd

QUESTION_AWARE = "question in the window"
COLUMNS = ["curve", "short", "kind", "mode", "ratio", "accuracy", "lo", "hi", "right", "items", "bytes", "bytes_mib",
           "kept_share", "nbits", "bits", "backend", "question_aware", "step_ratio", "step_ratio_lo", "step_ratio_hi",
           "timed_steps"]


def curve_of(row) -> str:
    """The name a row is drawn under: the press (with the question-aware mark), the quantized
    setting, or "full cache"."""
    if row.kind == "press":
        return f"{row.press} ({QUESTION_AWARE})" if row.question_aware else row.press
    return "full cache" if row.kind == "full" else f"{row.backend} {row.nbits}-bit"


def sweep_frame(rows, full_bits: int = 32) -> pd.DataFrame:
    """Sweep rows (kvviz.shrink.sweep.SweepRow) -> one row each, with the accuracy's interval;
    `full_bits`: bits per value of the full cache (the model's dtype)."""
    out = []
    for r in rows:
        lo, hi = r.interval
        curve = curve_of(r)
        out.append({"curve": curve, "short": f"{curve} {r.ratio * 100:g}%" if r.kind == "press" else curve,
                    "kind": r.kind, "mode": r.mode, "ratio": r.ratio, "accuracy": r.accuracy, "lo": lo, "hi": hi,
                    "right": f"{r.right}/{r.items}", "items": r.items, "bytes": r.bytes, "bytes_mib": r.bytes / 2**20,
                    "kept_share": r.kept_share, "nbits": r.nbits,
                    "bits": r.nbits if r.kind == "quantized" else full_bits if r.kind == "full" else None,
                    "backend": r.backend or ("full cache" if r.kind == "full" else ""),
                    "question_aware": r.question_aware, "step_ratio": r.step_ratio, "step_ratio_lo": r.step_ratio_lo,
                    "step_ratio_hi": r.step_ratio_hi, "timed_steps": r.timed_steps})
    return pd.DataFrame(out, columns=COLUMNS)


TIPS = [alt.Tooltip("mode:N", title="setting"), alt.Tooltip("right:N", title="right answers"),
        alt.Tooltip("accuracy:Q", format=".0%"), alt.Tooltip("lo:Q", title="95% interval from", format=".0%"),
        alt.Tooltip("hi:Q", title="to", format=".0%"), alt.Tooltip("kept_share:Q", title="positions still attended", format=".0%"),
        alt.Tooltip("bytes_mib:Q", title="cache after the context (MiB)", format=",.2f")]


def headed(chart: alt.LayerChart, heading: str) -> alt.LayerChart:
    """The chart with `heading` as its title, left-aligned (unchanged when `heading` is empty)."""
    return chart.properties(title=alt.TitleParams(heading, anchor="start")) if heading else chart


RATIO_COLORS = ["#9ecae1", "#4292c6", "#08519c", "#08306b"]  # lighter: less evicted
FULL_LABEL, FULL_COLOR = "0% (full cache)", "#999999"  # the full cache's band: none evicted
STEP_PX = 12  # one ratio's line in a press's row (Vega-Lite steps the innermost band)
TOP_LEGEND = dict(orient="top", titleOrient="top")  # its title above its entries: a phone holds the row
RATIO_LEGEND_COLUMNS = 2  # five entries in one row ran 180 px past a phone's chart
# A press's name on two lines where it has two parts ("SnapKV" / "(question in the window)",
# "AdaKV-" / "ExpectedAttention"): the names' width is the plot's and the legend's left edge.
TWO_LINES = ("indexof(datum.label, ' (') > 0 ? [slice(datum.label, 0, indexof(datum.label, ' (')), "
             "slice(datum.label, indexof(datum.label, ' (') + 1)] : indexof(datum.label, '-') > 0 ? "
             "[slice(datum.label, 0, indexof(datum.label, '-') + 1), slice(datum.label, indexof(datum.label, '-') + 1)] "
             ": datum.label")


def ratio_label(ratio: float) -> str:
    return f"{ratio * 100:g}%"


def press_accuracy_chart(df: pd.DataFrame, heading: str = "") -> alt.LayerChart:
    """Accuracy per press: a row per press, a line in it per share of the context evicted (darker:
    more), the dot its accuracy and the bar its 95 % Wilson interval; the grey band is the full
    cache's interval (in the legend as "0% (full cache)") and the dashed line its accuracy. One view,
    as wide as its container; `heading` above it (a partial sweep's "Partial sweep: 5 of 52 items so
    far"), none when empty. The x axis's title ends at the plot's right edge, over the press names:
    a phone's plot is narrower than the title."""
    presses = df[df["kind"] == "press"].assign(evicted=lambda d: d["ratio"].map(ratio_label))
    order = list(dict.fromkeys(presses["curve"]))
    labels = [ratio_label(r) for r in sorted(presses["ratio"].unique())]
    title = "accuracy (dot) and its 95% interval (bar)"
    axis = alt.Axis(format="%", titleAnchor="end")
    x = alt.X("accuracy:Q", title=title, scale=alt.Scale(domain=[0, 1]), axis=axis)
    full = df[df["kind"] == "full"].assign(evicted=FULL_LABEL)
    domain = labels + [FULL_LABEL] * (not full.empty)
    legend = alt.Legend(**TOP_LEGEND, columns=RATIO_LEGEND_COLUMNS, symbolOpacity=1)  # the band's 0.25 not on it
    colors = RATIO_COLORS[:len(labels)] + [FULL_COLOR] * (not full.empty)
    color = alt.Color("evicted:N", sort=domain, title="share of the context evicted", legend=legend,
                      scale=alt.Scale(domain=domain, range=colors))
    base = alt.Chart(presses).encode(
        y=alt.Y("curve:N", sort=order, title=None, axis=alt.Axis(labelLimit=230, labelExpr=TWO_LINES)),
        yOffset=alt.YOffset("evicted:N", sort=labels), color=color, tooltip=TIPS)
    bars = base.mark_rule(strokeWidth=2).encode(x=alt.X("lo:Q", scale=alt.Scale(domain=[0, 1]), title=title, axis=axis),
                                                x2="hi:Q")
    dots = base.mark_point(filled=True, size=36, opacity=1).encode(x=x)
    full_tips = [alt.Tooltip("accuracy:Q", title="full cache", format=".0%"),
                 alt.Tooltip("lo:Q", title="95% interval from", format=".0%"), alt.Tooltip("hi:Q", title="to", format=".0%")]
    band = alt.Chart(full).mark_rect(opacity=0.25).encode(x="lo:Q", x2="hi:Q", color=color, tooltip=full_tips)
    line = alt.Chart(full).mark_rule(color="#222222", strokeDash=[4, 3]).encode(x="accuracy:Q", tooltip=full_tips)
    return headed(alt.layer(band, line, bars, dots).properties(height=alt.Step(STEP_PX), width="container"), heading)


def quant_accuracy_chart(df: pd.DataFrame, heading: str = "") -> alt.LayerChart:
    """Quantized caches on their own axis: accuracy with its 95 % interval against bits per stored
    value (the full cache at its own bits), one colour per backend, side by side at each width;
    `heading` as press_accuracy_chart's. What the backends keep unquantized is the page's caption
    (QUANT_NOTE), not the axis title: a phone cut it."""
    rows = df[df["kind"].isin(["quantized", "full"])].copy()
    rows["bits_label"] = [f"{int(b)}-bit" + (" (full)" if k == "full" else "") for b, k in zip(rows["bits"], rows["kind"])]
    order = [label for _, label in sorted(set(zip(rows["bits"], rows["bits_label"])))]
    x = alt.X("bits_label:N", sort=order, title="bits per stored value", axis=alt.Axis(labelAngle=0))
    y = alt.Y("accuracy:Q", title="accuracy", scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%"))
    backends = [b for b in ("quanto", "hqq", "fp8", "full cache") if b in set(rows["backend"])]
    colors = {"quanto": "#4C78A8", "hqq": "#F58518", "fp8": "#54A24B", "full cache": "#222222"}
    color = alt.Color("backend:N", title="backend", legend=alt.Legend(**TOP_LEGEND),
                      scale=alt.Scale(domain=backends, range=[colors[b] for b in backends]))
    base = alt.Chart(rows).encode(x=x, xOffset="backend:N", y=y, color=color, tooltip=TIPS)
    return headed(alt.layer(base.mark_rule(strokeWidth=2).encode(y="lo:Q", y2="hi:Q"),
                            base.mark_point(filled=True, size=60)).properties(
        height=220, width="container", autosize=alt.AutoSizeParams(type="fit-x", contains="padding")), heading)
    # fit the width only: the plot keeps its 220 px and the chart grows to hold its legend and title
    # (fitted whole, the legend and a partial sweep's title left the plot some 25 px)


QUANT_NOTE = ("Bits per stored value; quanto and HQQ keep the newest 16 tokens at full precision (their "
              "residual window). The dot is the accuracy, the bar its 95 % Wilson interval.")


def task_frame(result) -> pd.DataFrame:
    """Accuracy per setting and task format (right / items of that format), from each item's answer."""
    from kvviz.shrink import task
    rows = []
    for r in result.rows:
        if len(r.answers) != len(result.items):
            continue
        for fmt in dict.fromkeys(i.task for i in result.items):
            hits = [task.TaskItem.expecting(i.expected).is_right(a) for a, i in zip(r.answers, result.items) if i.task == fmt]
            rows.append({"mode": r.mode, "task": fmt, "right": sum(hits), "items": len(hits),
                         "accuracy": sum(hits) / len(hits)})
    return pd.DataFrame(rows, columns=["mode", "task", "right", "items", "accuracy"])


def task_table(result) -> pd.DataFrame:
    """A row per setting (in the sweep's order), a column per task format ("right/items"). Built
    row by row, never pivoted on the label: a file may name two rows alike."""
    frame = task_frame(result)
    if frame.empty:
        return frame
    formats = list(dict.fromkeys(frame["task"]))
    per_row = len(formats)  # task_frame gives each kept row one line per format, in order
    cells = [f"{a}/{n}" for a, n in zip(frame["right"], frame["items"])]
    rows = [{"mode": frame["mode"].iloc[k], **dict(zip(formats, cells[k:k + per_row]))}
            for k in range(0, len(cells), per_row)]
    return pd.DataFrame(rows, columns=["mode", *formats])


def answers_frame(result, mode: str) -> pd.DataFrame:
    """Each item's answer under one setting, beside the full cache's: plain data, never rendered."""
    from kvviz.shrink import task
    rows = {r.mode: r for r in result.rows}
    row, full = rows.get(mode), next((r for r in result.rows if r.kind == "full"), None)
    if row is None or len(row.answers) != len(result.items):
        return pd.DataFrame(columns=["item", "task", "depth", "expected", "answer", "right", "full cache's answer"])
    return pd.DataFrame([{"item": n + 1, "task": i.task, "depth": i.depth, "expected": ", ".join(i.expected),
                          "answer": a, "right": task.TaskItem.expecting(i.expected).is_right(a),
                          "full cache's answer": full.answers[n] if full is not None and len(full.answers) > n else ""}
                         for n, (a, i) in enumerate(zip(row.answers, result.items))])
