"""Pure frames and Altair charts of the quality sweep (kvviz.shrink.sweep): accuracy with its 95 %
interval for every press against the share of the context it evicts, one small panel per press
beside the full cache's band; the quantized caches on their own axis, bits per value; accuracy per
task format; each item's answer.

Columns: sweep_frame -> curve, short, kind, mode, ratio, accuracy, lo, hi, right, items, bytes,
bytes_mib, kept_share, nbits, bits, backend, question_aware, step_ratio, step_ratio_lo,
step_ratio_hi, timed_steps.
"""
from __future__ import annotations

import altair as alt
import pandas as pd

QUESTION_AWARE = "question in the window"
PANEL_PX = 170  # one press's panel
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


def full_band(df: pd.DataFrame, curves: list[str]) -> pd.DataFrame:
    """The full cache's accuracy interval once per press panel (its band spans the panel)."""
    full = df[df["kind"] == "full"]
    if full.empty:
        return pd.DataFrame(columns=["curve", "lo", "hi", "accuracy", "x0", "x1"])
    f = full.iloc[0]
    return pd.DataFrame([{"curve": c, "lo": f["lo"], "hi": f["hi"], "accuracy": f["accuracy"], "x0": 0.0, "x1": 1.0}
                         for c in curves])


TIPS = [alt.Tooltip("mode:N", title="setting"), alt.Tooltip("right:N", title="right answers"),
        alt.Tooltip("accuracy:Q", format=".0%"), alt.Tooltip("lo:Q", title="95% interval from", format=".0%"),
        alt.Tooltip("hi:Q", title="to", format=".0%"), alt.Tooltip("kept_share:Q", title="positions still attended", format=".0%"),
        alt.Tooltip("bytes_mib:Q", title="cache after the context (MiB)", format=",.2f")]


def press_accuracy_chart(df: pd.DataFrame) -> alt.FacetChart:
    """One panel per press: accuracy (dot) and its 95 % Wilson interval (bar) at each share of the
    context evicted, a line through the dots; the grey band is the full cache's interval."""
    presses = df[df["kind"] == "press"]
    curves = list(dict.fromkeys(presses["curve"]))
    data = pd.concat([presses.assign(layer="press"), full_band(df, curves).assign(layer="full")], ignore_index=True)
    domain = alt.Scale(domain=[0, 1])
    x = alt.X("ratio:Q", title="share of the context evicted", scale=domain,
              axis=alt.Axis(values=[0.25, 0.5, 0.75, 0.875], format="~%", labelAngle=0, labelOverlap=True))
    y = alt.Y("accuracy:Q", title="accuracy", scale=domain, axis=alt.Axis(format="%"))
    full = alt.Chart().transform_filter("datum.layer == 'full'").mark_rect(color="#999999", opacity=0.3).encode(
        x=alt.X("x0:Q", scale=domain, title="share of the context evicted"), x2="x1:Q",
        y=alt.Y("lo:Q", scale=domain, title="accuracy"), y2="hi:Q",
        tooltip=[alt.Tooltip("accuracy:Q", title="full cache", format=".0%"),
                 alt.Tooltip("lo:Q", title="95% interval from", format=".0%"), alt.Tooltip("hi:Q", title="to", format=".0%")])
    base = alt.Chart().transform_filter("datum.layer == 'press'").encode(x=x, y=y, tooltip=TIPS)
    bars = base.mark_rule(color="#1f6feb", strokeWidth=2).encode(y="lo:Q", y2="hi:Q")
    line = base.mark_line(color="#1f6feb", opacity=0.5)
    dots = base.mark_point(color="#1f6feb", filled=True, size=45)
    return alt.layer(full, line, bars, dots, data=data).properties(width=PANEL_PX, height=PANEL_PX).facet(
        facet=alt.Facet("curve:N", sort=curves, title=None, header=alt.Header(labelFontSize=12, labelLimit=PANEL_PX + 40)),
        columns=4)


def quant_accuracy_chart(df: pd.DataFrame) -> alt.Chart:
    """Quantized caches on their own axis: accuracy with its 95 % interval against bits per stored
    value (the full cache at its own bits), one colour per backend, side by side at each width."""
    rows = df[df["kind"].isin(["quantized", "full"])].copy()
    rows["bits_label"] = [f"{int(b)}-bit" + (" (full cache)" if k == "full" else "") for b, k in zip(rows["bits"], rows["kind"])]
    order = [label for _, label in sorted(set(zip(rows["bits"], rows["bits_label"])))]
    x = alt.X("bits_label:N", sort=order, title="bits per stored value (older tokens; the newest 16 stay full)",
              axis=alt.Axis(labelAngle=0))
    y = alt.Y("accuracy:Q", title="accuracy", scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%"))
    color = alt.Color("backend:N", title="backend", legend=alt.Legend(orient="top"))
    base = alt.Chart(rows).encode(x=x, xOffset="backend:N", y=y, color=color, tooltip=TIPS)
    return alt.layer(base.mark_rule(strokeWidth=2).encode(y="lo:Q", y2="hi:Q"),
                     base.mark_point(filled=True, size=60)).properties(height=220, width="container")


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
    """task_frame pivoted: a row per setting, a column per task format ("right/items")."""
    frame = task_frame(result)
    if frame.empty:
        return frame
    frame["cell"] = [f"{a}/{n}" for a, n in zip(frame["right"], frame["items"])]
    table = frame.pivot(index="mode", columns="task", values="cell")
    return table.reindex([r.mode for r in result.rows if r.mode in table.index]).reset_index()


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
