"""The Engine page's Altair charts: one watched engine's frames (kvviz.vllm.views) in, pictures
out. Pure. The series names, and so the colours' keys, are the frames' own (events, metrics,
derived: kvviz.vllm.views says which)."""
from __future__ import annotations

import altair as alt
import pandas as pd

from kvviz.vllm.views import POOL_COLORS

FIT_WIDTH = alt.AutoSizeParams(type="fit-x", contains="padding")  # Streamlit's default fits the height too


def pool_chart(df: pd.DataFrame, usable_blocks: int) -> alt.Chart:
    """One stacked bar of the usable pool (x domain [0, usable_blocks]). Columns: part, blocks, order."""
    return alt.Chart(df).mark_bar(height=34).encode(
        x=alt.X("sum(blocks):Q", title=f"blocks (of {usable_blocks} usable)",
                scale=alt.Scale(domain=[0, max(1, usable_blocks)], nice=False)),
        color=alt.Color("part:N", title=None, scale=alt.Scale(domain=list(POOL_COLORS), range=list(POOL_COLORS.values())),
                        legend=alt.Legend(orient="bottom", columns=1, labelLimit=400)),
        order=alt.Order("order:Q"), tooltip=["part:N", "blocks:Q"],
    ).properties(height=40, autosize=FIT_WIDTH)  # the bar's row: the chart grows to hold its axis and legend
    # (a fixed 60 px in all left the bar 0 px high under its three-line legend)


def lines_chart(df: pd.DataFrame, y: str, colors: dict[str, str], y_title: str, plot_px: int = 160) -> alt.Chart:
    """Series over watch time (step lines). Columns: t_s, series, `y`. The plot is `plot_px` high
    and the chart grows to hold its legend and axes: draw it with no height (fitted into 240 px,
    its four legend lines and axes left the plot 28 px)."""
    return alt.Chart(df).mark_line(interpolate="step-after").encode(
        x=alt.X("t_s:Q", title="seconds since attached"),
        y=alt.Y(f"{y}:Q", title=y_title, axis=alt.Axis(format="d", tickMinStep=1)),
        color=alt.Color("series:N", title=None, scale=alt.Scale(domain=list(colors), range=list(colors.values())),
                        legend=alt.Legend(orient="top", columns=1, labelLimit=0)),  # one entry a line: none cut
        tooltip=["t_s:Q", "series:N", f"{y}:Q"],
    ).properties(height=plot_px, autosize=FIT_WIDTH)


def histogram_chart(df: pd.DataFrame, title: str) -> alt.Chart:
    return alt.Chart(df).mark_bar(color="#4C78A8").encode(
        x=alt.X("bucket:N", sort=alt.SortField("le"), title=title),
        y=alt.Y("requests:Q", title="count"), tooltip=["bucket:N", "requests:Q"],
    )


def tree_chart(df: pd.DataFrame) -> alt.Chart:
    """Sequences (rows) by block position (columns), coloured by how many sequences share each
    block: a column of one colour down many rows is a shared prefix. Columns: tree_frame's."""
    return alt.Chart(df).mark_rect(stroke="white", strokeWidth=1).encode(
        x=alt.X("position:O", title="block position in the sequence"),
        y=alt.Y("sequence:N", title=None, sort=None),
        color=alt.Color("shared_by:Q", title="sequences sharing the block", scale=alt.Scale(scheme="purples"),
                        legend=alt.Legend(orient="bottom", gradientLength=160)),  # beside the rows it ran
        # past a phone's edge
        tooltip=["sequence:N", "position:Q", "block:N", "shared_by:Q", "text:N"],
    ).properties(height=alt.Step(16), autosize=FIT_WIDTH)  # a row per sequence; the chart grows to hold them
