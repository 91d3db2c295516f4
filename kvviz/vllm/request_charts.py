"""Altair charts of the per-request table and the block lifetimes (frames: kvviz.vllm.request_views).
Pure."""
from __future__ import annotations

import altair as alt
import pandas as pd

from kvviz.vllm.reasons import CODES


def reasons_chart(df: pd.DataFrame) -> alt.Chart:
    return alt.Chart(df).mark_bar(color="#4C78A8").encode(
        x=alt.X("requests:Q", title="requests (derived)"),
        y=alt.Y("reason:N", sort=list(CODES), title="why the rest missed"),
        tooltip=["reason:N", "requests:Q"])


def value_histogram(df: pd.DataFrame, column: str, title: str) -> alt.Chart:
    """Counts of `column`'s values in at most 20 bins."""
    return alt.Chart(df).mark_bar(color="#6A3D9A").encode(
        x=alt.X(f"{column}:Q", bin=alt.Bin(maxbins=20), title=title),
        y=alt.Y("count():Q", title="blocks" if column != "gap_s" else "gaps"),
        tooltip=[alt.Tooltip(f"{column}:Q", bin=True, title=title), alt.Tooltip("count():Q", title="count")])
