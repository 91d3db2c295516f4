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
