"""Pure frames and Altair charts for the Shrink page: kept vs evicted positions, bytes, step time.

Columns: kept_map_frame -> layer, kv_head, row (layer or "layer · head"), position, status
("kept" / "evicted"), token; steps_frame -> run, step, kv_bytes, kv_mib (MiB, as on Live), step_ms.
"""
from __future__ import annotations

from typing import Sequence

import altair as alt
import pandas as pd

KEPT, EVICTED = "kept", "evicted"


def kept_map_frame(kept: dict, prompt_tokens: int, pieces: Sequence[str], per_head: bool = False) -> pd.DataFrame:
    """One row per (layer[, KV head], prompt position): kept or evicted, with the token's text.

    `kept`: layer -> (kv_heads, n_kept) positions (a tensor or nested lists). Without per_head a
    position counts as kept in a layer when any head kept it."""
    rows = []
    for layer in sorted(kept):
        heads = [set(map(int, row)) for row in kept[layer].tolist()] if hasattr(kept[layer], "tolist") \
            else [set(map(int, row)) for row in kept[layer]]
        groups = list(enumerate(heads)) if per_head else [(None, set().union(*heads))]
        for head, positions in groups:
            label = f"L{layer}" if head is None else f"L{layer} · h{head}"
            for pos in range(prompt_tokens):
                rows.append({"layer": layer, "kv_head": -1 if head is None else head, "row": label,
                             "position": pos, "status": KEPT if pos in positions else EVICTED,
                             "token": pieces[pos] if pos < len(pieces) else ""})
    return pd.DataFrame(rows, columns=["layer", "kv_head", "row", "position", "status", "token"])


def kept_map_chart(df: pd.DataFrame) -> alt.Chart:
    """Layers (or layer · head) down, prompt positions across; kept dark, evicted pale."""
    order = list(dict.fromkeys(df["row"]))
    return alt.Chart(df).mark_rect().encode(
        x=alt.X("position:O", title="prompt position", axis=alt.Axis(labelOverlap=True, labelAngle=0)),
        y=alt.Y("row:N", sort=order, title="decoder layer" if df["kv_head"].max() < 0 else "layer · KV head"),
        color=alt.Color("status:N", title="the press", scale=alt.Scale(domain=[KEPT, EVICTED],
                                                                        range=["#1f6feb", "#e6e9ef"]),
                        legend=alt.Legend(orient="top")),
        tooltip=[alt.Tooltip("row:N", title="layer"), alt.Tooltip("position:Q"), alt.Tooltip("status:N"),
                 alt.Tooltip("token:N", title="token text")],
    ).properties(height=alt.Step(22))  # a row per layer: the chart grows to hold its
    # legend and axis (a fixed 120 px left the rows no room: they collapsed to a hairline)


def steps_frame(runs: dict[str, Sequence]) -> pd.DataFrame:
    """{run label: StepRecords} -> long form, one row per step."""
    return pd.DataFrame([{"run": label, "step": s.step, "kv_bytes": s.kv_bytes, "kv_mib": s.kv_bytes / 2**20,
                          "step_ms": s.step_ms} for label, steps in runs.items() for s in steps],
                        columns=["run", "step", "kv_bytes", "kv_mib", "step_ms"])


def time_cap(df: pd.DataFrame) -> float:
    """The step-time axis's top: 3 × the median decode step, or just above the faster of the two
    prompts (step 0) when that is higher, so one slow step (a first run's warm-up, a backend's
    first call) does not flatten the others; inf without decode steps (nothing clipped)."""
    if not len(df):
        return float("inf")
    decode, prompt = df.loc[df["step"] > 0, "step_ms"], df.loc[df["step"] == 0, "step_ms"]
    if not len(decode):
        return float("inf")
    return float(max(3 * decode.median(), 1.1 * prompt.min() if len(prompt) else 0.0))


def steps_chart(df: pd.DataFrame, field: str, title: str) -> alt.Chart:
    """`field` (kv_mib, kv_bytes or step_ms) per step, one line per run. Step times over `time_cap` are
    drawn at the top edge (clamped), their real times in the tooltip."""
    y = alt.Y(f"{field}:Q", title=title)
    if field == "step_ms" and len(df):
        cap = time_cap(df)
        if df["step_ms"].max() > cap:
            y = alt.Y(f"{field}:Q", title=f"{title}, clipped at {cap:,.0f}", scale=alt.Scale(domain=[0, cap], clamp=True))
    return alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("step:Q", title="step (0 = prompt)", axis=alt.Axis(format="d")),
        y=y, color=alt.Color("run:N", legend=alt.Legend(orient="top")),
        tooltip=["run:N", "step:Q", alt.Tooltip(f"{field}:Q", format=",.2f" if field == "kv_mib" else ",.1f")],
    ).properties(height=220)


def sweep_frame(rows) -> pd.DataFrame:
    """Sweep rows (kvviz.shrink.sweep.SweepRow) -> one row each, plus the curve each belongs to
    ("full cache", the press's name, or the quantized setting)."""
    out = []
    for r in rows:
        curve = r.press if r.kind == "press" else "full cache" if r.kind == "full" else f"{r.backend} {r.nbits}-bit"
        short = f"{curve} {r.ratio:.0%}" if r.kind == "press" else curve
        out.append({"curve": curve, "short": short, "kind": r.kind, "mode": r.mode, "ratio": r.ratio,
                    "accuracy": r.accuracy,
                    "right": f"{r.right}/{r.items}", "bytes": r.bytes, "peak_bytes": r.peak_bytes,
                    "bytes_mib": r.bytes / 2**20, "peak_mib": r.peak_bytes / 2**20, "step_ratio": r.step_ratio,
                    "step_ratio_lo": r.step_ratio_lo, "step_ratio_hi": r.step_ratio_hi})
    return pd.DataFrame(out, columns=["curve", "short", "kind", "mode", "ratio", "accuracy", "right", "bytes", "peak_bytes",
                                      "bytes_mib", "peak_mib", "step_ratio", "step_ratio_lo", "step_ratio_hi"])


def with_full_on_every_curve(df: pd.DataFrame) -> pd.DataFrame:
    """Each press's curve starts at the full cache's point (ratio 0: nothing evicted)."""
    full = df[df["kind"] == "full"]
    starts = [full.assign(curve=press) for press in df.loc[df["kind"] == "press", "curve"].unique()]
    return pd.concat([df, *starts], ignore_index=True) if starts and not full.empty else df


SAME = " = "  # joins the names of settings whose marks fall on the same points: "SnapKV = StreamingLLM"
SAME_RATIO = 0.005  # two quantized settings this close in bytes saved (and equal in accuracy) draw as one point


def _points(rows: pd.DataFrame) -> list[tuple[float, float]]:
    return sorted(zip(rows["ratio"], rows["accuracy"]))


def _coincide(a: list, b: list, ratio_tolerance: float) -> bool:
    return len(a) == len(b) and all(abs(p[0] - q[0]) <= ratio_tolerance and abs(p[1] - q[1]) < 1e-9
                                    for p, q in zip(a, b))


def same_scores(df: pd.DataFrame) -> dict[str, str]:
    """curve -> the name it is drawn under: its own, or the names of every curve of its kind whose
    points all coincide with its own, joined by SAME (a line or a point drawn over an identical
    one hides it; the legend then names both). Quantized settings coincide within SAME_RATIO."""
    groups: list[tuple[str, list, list[str]]] = []  # (kind, points, curves)
    for curve, rows in df.groupby("curve", sort=False):
        kind, points = rows["kind"].iloc[0], _points(rows)
        tolerance = SAME_RATIO if kind == "quantized" else 1e-9
        group = next((g for g in groups if g[0] == kind and _coincide(g[1], points, tolerance)), None)
        if group is None:
            groups.append((kind, points, [curve]))
        else:
            group[2].append(curve)
    return {curve: SAME.join(curves) for _, _, curves in groups for curve in curves}


# Enough distinct colours for every press and quantized setting kvviz offers (Vega's default ten
# would give the eleventh the first one's colour); the full cache is black.
SWEEP_COLORS = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#EECA3B", "#B279A2", "#FF9DA6",
                "#9D755D", "#BAB0AC", "#17BECF", "#8C564B", "#BCBD22", "#1F3A93"]
FULL_COLOR = "#222222"


def sweep_accuracy_chart(df: pd.DataFrame) -> alt.Chart:
    """Accuracy against the share evicted: a line per press from the full cache's point (a black
    ring, drawn on top); a quantized setting is a diamond at the share of bytes it saved. Settings
    whose marks would fall on the same points are drawn and named as one ("SnapKV = StreamingLLM").
    Every setting has its own colour and its own legend entry, one a row below the plot."""
    names = same_scores(df)
    df = with_full_on_every_curve(df).assign(shown=lambda d: d["curve"].map(names))
    shown = list(dict.fromkeys([*df.loc[df["kind"] == "press", "shown"], *df.loc[df["kind"] == "full", "shown"],
                                *df.loc[df["kind"] == "quantized", "shown"]]))
    colors = [FULL_COLOR if name == "full cache" else SWEEP_COLORS[i % len(SWEEP_COLORS)] for i, name in enumerate(shown)]
    tips = [alt.Tooltip("mode:N"), alt.Tooltip("right:N", title="right answers"),
            alt.Tooltip("bytes_mib:Q", title="cache after the prompt (MiB)", format=",.2f"),
            alt.Tooltip("peak_mib:Q", title="peak (MiB)", format=",.2f")]
    legend = alt.Legend(orient="bottom", direction="vertical")  # one a row: fits a phone, and the chart's
    # height does not change with its width (Streamlit keeps a redrawn chart's first height)
    base = alt.Chart(df).encode(
        x=alt.X("ratio:Q", title=["share of the prompt's cache removed", "(press: evicted; quantized: bytes saved)"],
                scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("accuracy:Q", title="accuracy (right answers / items)", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("shown:N", title="press or setting", scale=alt.Scale(domain=shown, range=colors),
                        legend=legend), tooltip=tips)
    lines = base.transform_filter("datum.kind == 'press'").mark_line(point=True).encode(detail="curve:N")
    points = base.transform_filter("datum.kind == 'quantized'").mark_point(shape="diamond", size=90, filled=True)
    full = base.transform_filter("datum.kind == 'full'").mark_point(size=150, filled=False, strokeWidth=2.5)
    # the plot keeps its 240 px and the chart grows to hold its legend (fit the width only)
    return (lines + points + full).properties(height=240,
                                              autosize=alt.AutoSizeParams(type="fit-x", contains="padding"))


def sweep_bytes_chart(df: pd.DataFrame) -> alt.Chart:
    """Bytes kept after the prompt and the run's peak, per setting (MiB), side by side."""
    long = df.melt(id_vars=["mode", "short", "ratio", "kind"], value_vars=["bytes_mib", "peak_mib"], var_name="what",
                   value_name="mib")
    long["what"] = long["what"].map({"bytes_mib": "cache after the prompt", "peak_mib": "peak during the run"})
    return alt.Chart(long).mark_bar().encode(
        y=alt.Y("short:N", sort=list(df["short"]), title=None, axis=alt.Axis(labelLimit=220)),
        x=alt.X("mib:Q", title="MiB (measured)"), yOffset="what:N",
        color=alt.Color("what:N", title=None, legend=alt.Legend(orient="top", direction="vertical")),
        tooltip=["mode:N", "what:N", alt.Tooltip("mib:Q", format=",.2f", title="MiB")],
    )
