"""The fleet view's Altair charts: per request what was cached where it went and what the best
replica held beyond that; per policy the modelled hit rate; per replica the hit rate. Pure."""
from __future__ import annotations

import altair as alt
import pandas as pd

from kvviz.vllm.charts import FIT_WIDTH

PARTS = ["cached where it went", "given up"]
PART_COLORS = ["#4C78A8", "#E45756"]
PLOT_PX = 180  # the plot's own height: labels and legend come on top of it, never out of it
BAR_PX = 28  # per bar of the horizontal charts


def given_up_chart(df: pd.DataFrame) -> alt.Chart:
    """Stacked bars, one per request in sending order (columns of fleet_frames.given_up_frame): vLLM's
    cached tokens where it went, and (derived) what the best replica held beyond that."""
    order = df.drop_duplicates("request").sort_values("order")["request"].tolist()
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("request:N", sort=order, title="request (in the order sent)", axis=alt.Axis(labelAngle=-45)),
        y=alt.Y("tokens:Q", stack=True, title="prompt tokens"),
        color=alt.Color("part:N", scale=alt.Scale(domain=PARTS, range=PART_COLORS), title=None,
                        legend=alt.Legend(orient="top")),
        tooltip=["request:N", "part:N", "tokens:Q"]).properties(height=PLOT_PX, autosize=FIT_WIDTH)


def policies_chart(df: pd.DataFrame) -> alt.Chart:
    """Hit rate per routing policy (columns of fleet_frames.policies_frame)."""
    return alt.Chart(df).mark_bar(color="#54A24B").encode(
        x=alt.X("hit_rate:Q", title="prompt tokens served from the cache (modelled)", axis=alt.Axis(format="%")),
        y=alt.Y("policy:N", sort=None, title=None),
        tooltip=["policy:N", alt.Tooltip("hit_rate:Q", format=".1%"), "cached_tokens:Q", "recomputed_tokens:Q"]
    ).properties(height=BAR_PX * max(1, len(df)), autosize=FIT_WIDTH)


def replicas_chart(df: pd.DataFrame) -> alt.Chart:
    """Each replica's hit rate over the logged requests (columns of fleet_frames.replicas_frame)."""
    return alt.Chart(df).mark_bar(color="#4C78A8").encode(
        x=alt.X("hit_rate_requests:Q", title="hit rate of its logged requests (vLLM's cached_tokens)",
                axis=alt.Axis(format="%")),
        y=alt.Y("replica:N", title=None),
        tooltip=["replica:N", "url:N", alt.Tooltip("hit_rate_requests:Q", format=".1%"), "requests:Q"]
    ).properties(height=BAR_PX * max(1, len(df)), autosize=FIT_WIDTH)


def prefix_map_chart(df: pd.DataFrame) -> alt.Chart:
    """Prefix × replica: the tokens each replica holds of each prefix family (fleet_frames.prefix_frame),
    one cell each, the number written in it."""
    order = df.groupby("prefix", sort=False)["tokens"].sum().sort_values(ascending=False).index.tolist()
    base = alt.Chart(df).encode(x=alt.X("replica:N", title=None, axis=alt.Axis(orient="top", labelAngle=0)),
                                y=alt.Y("prefix:N", sort=order, title=None, axis=alt.Axis(labelLimit=260)))
    cells = base.mark_rect().encode(
        color=alt.Color("tokens:Q", scale=alt.Scale(scheme="blues"), title="tokens held (events)"),
        tooltip=["prefix:N", "replica:N", "tokens:Q"])
    dark = max(1, int(df["tokens"].max() or 0)) / 2  # the darker half of the scale: white digits
    text = base.mark_text(fontSize=12).encode(
        text="tokens:Q", color=alt.condition(alt.datum.tokens > dark, alt.value("white"), alt.value("black")))
    return (cells + text).properties(height=BAR_PX * max(1, df["prefix"].nunique()), autosize=FIT_WIDTH)
