"""Pure Altair charts of the serving page: the block pool as a grid, its usage and the requests over steps.

Inputs are kvviz.serving.compute's plain snapshots, read by attribute (so this module needs neither torch
nor transformers), reshaped here into long-form DataFrames; one builder per chart, each docstring
lists its input columns. As in kvviz.viz.charts, every scale that would follow the data is fixed by
parameters for a run, so a page builds each chart's Vega-Lite once (`charts.to_vega_lite`) and only swaps its data
(`charts.vega_lite_with_data`) while replaying the steps.
"""
from __future__ import annotations

import altair as alt
import pandas as pd

from kvviz.viz.charts import RULE_COLOR, STATE_COLORS

FREE, SHARED, CACHED = "free", "shared", "cached"  # as kvviz.serving.compute names them
REQUEST_COLORS = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#EECA3B", "#9D755D",
                  "#FF9DA6", "#2F6B3A", "#B6992D"]
SPECIAL_COLORS = {SHARED: "#6A3D9A", CACHED: "#BCBDDC", FREE: STATE_COLORS["free"]}
REQUEST_STATE_COLORS = {"waiting": "#BDBDBD", "preempted": "#E45756", "prefilling": "#F58518",
                        "decoding": "#4C78A8", "finished": "#D5E8D4"}
USAGE_COLORS = {"held by requests": "#4C78A8", "without prefix sharing (modelled)": "#E45756",
                "kept cached for reuse": "#9E9AC8"}
REUSE_COLORS = {"reused from cached blocks": "#6A3D9A", "computed": "#D5D5D5"}
POOL_SERIES = "pool size"  # the usage chart's rule, named in its legend
# The grid legend: every owner with the letter its cells show (r0 … rN, S, c, free).
OWNER_LEGEND_EXPR = ("datum.label == 'shared' ? 'S: shared' : datum.label == 'cached' ? "
                     "'c: cached' : datum.label")


GRID_CELL_PX = 20  # 16 columns of 20 px fit a phone (26 px ran 33 px past a 390 px screen)
GRID_LEGEND_COLUMNS = 4  # the legend's rows fit under the grid's 320 px ("c: cached" the widest entry)


def owner_colors(request_ids: list[str]) -> dict[str, str]:
    """A fixed colour per request, then shared / cached / free."""
    colors = {rid: REQUEST_COLORS[i % len(REQUEST_COLORS)] for i, rid in enumerate(request_ids)}
    return colors | SPECIAL_COLORS


def short_label(owner: str) -> str:
    """What a block shows: the request's number, S(hared), c(ached) or nothing when free."""
    return {SHARED: "S", CACHED: "c", FREE: ""}.get(owner, owner.lstrip("r"))


def grid_frame(snapshot, columns: int = 16) -> pd.DataFrame:
    """Columns: block, row, col, owner, label: one row per block of the pool."""
    owners = list(snapshot.block_owners)
    return pd.DataFrame({"block": range(len(owners)), "row": [i // columns for i in range(len(owners))],
                         "col": [i % columns for i in range(len(owners))], "owner": owners,
                         "label": [short_label(o) for o in owners]})


def pool_grid_chart(df: pd.DataFrame, request_ids: list[str], num_blocks: int, columns: int = 16) -> alt.LayerChart:
    """The block pool, `columns` blocks per row, coloured by owning request / shared / cached / free.

    Input columns (grid_frame): block, row, col, owner, label.
    """
    colors = owner_colors(request_ids)
    rows = list(range(-(-num_blocks // columns)))
    base = alt.Chart().encode(
        x=alt.X("col:O", axis=None, scale=alt.Scale(domain=list(range(columns)))),
        y=alt.Y("row:O", axis=None, scale=alt.Scale(domain=rows)),
    )
    legend = alt.Legend(orient="bottom", direction="horizontal", columns=min(len(colors), GRID_LEGEND_COLUMNS),
                        labelExpr=OWNER_LEGEND_EXPR, symbolType="square")
    cells = base.mark_rect(stroke="white", strokeWidth=2).encode(
        color=alt.Color("owner:N", title="block held by", legend=legend,
                        scale=alt.Scale(domain=list(colors), range=list(colors.values()))),
        tooltip=["block:Q", alt.Tooltip("owner:N", title="held by")],
    )
    text = base.mark_text(fontSize=11, color="white").encode(text="label:N")
    return alt.layer(cells, text, data=df).properties(height=alt.Step(GRID_CELL_PX), width=alt.Step(GRID_CELL_PX))


def usage_frame(snapshots) -> pd.DataFrame:
    """Columns: step, series, blocks: blocks held, kept cached, and needed without sharing."""
    rows = []
    for s in snapshots:
        rows += [{"step": s.step, "series": "held by requests", "blocks": s.num_used_blocks},
                 {"step": s.step, "series": "kept cached for reuse", "blocks": s.num_cached_blocks},
                 {"step": s.step, "series": "without prefix sharing (modelled)", "blocks": s.unshared_blocks}]
    return pd.DataFrame(rows, columns=["step", "series", "blocks"])


def usage_chart(df: pd.DataFrame, num_blocks: int, max_step: int, max_blocks: int | None = None) -> alt.LayerChart:
    """Blocks in use per step against the pool's size (a rule, named in the legend).

    Input columns (usage_frame): step, series, blocks. x domain [1, max_step]; y domain
    [0, max_blocks], by default 1.1 x the pool. The legend lists its entries one per line below
    the plot, so the chart never grows wider than its column.
    """
    top = max_blocks or max(1, int(num_blocks * 1.1))
    pool_name = f"{POOL_SERIES}: {num_blocks} blocks"
    names, hues = [*USAGE_COLORS, pool_name], [*USAGE_COLORS.values(), RULE_COLOR]
    color_scale = alt.Scale(domain=names, range=hues)
    legend = alt.Legend(orient="bottom", columns=1, labelLimit=400, symbolType="stroke")
    lines = alt.Chart().mark_line(point=True, clip=True, interpolate="step-after").encode(
        x=alt.X("step:Q", title="step (forward pass)", scale=alt.Scale(domain=[1, max(max_step, 2) + 0.5], nice=False),
                axis=alt.Axis(labelFlush=True)),  # the last step's label inside the chart's edge
        y=alt.Y("blocks:Q", title="blocks", scale=alt.Scale(domain=[0, top], nice=False)),
        color=alt.Color("series:N", title=None, scale=color_scale, legend=legend),
        strokeDash=alt.StrokeDash("series:N", legend=None, scale=alt.Scale(
            domain=list(USAGE_COLORS), range=[[1, 0], [6, 4], [2, 2]])),
        tooltip=["step:Q", "series:N", "blocks:Q"],
    )
    pool = alt.Chart(alt.InlineData(values=[{"blocks": num_blocks, "series": pool_name}]))
    rule = pool.mark_rule(strokeWidth=1.5).encode(
        y="blocks:Q", color=alt.Color("series:N", scale=color_scale, legend=legend))
    return alt.layer(lines, rule, data=df)  # the rows at the top level: swappable


def timeline_frame(snapshots) -> pd.DataFrame:
    """Columns: step, request_id, state, cached_tokens, blocks: one row per request and step
    (requests not yet submitted are left out)."""
    rows = [{"step": s.step, "request_id": r.request_id, "state": r.state, "cached_tokens": r.cached_tokens,
             "blocks": r.num_blocks} for s in snapshots for r in s.requests if r.state != "upcoming"]
    return pd.DataFrame(rows, columns=["step", "request_id", "state", "cached_tokens", "blocks"])


FIT_WIDTH = alt.AutoSizeParams(type="fit-x", contains="padding")  # Streamlit's default fits the height too
STATE_COLUMNS = 3  # the states' legend under the lanes, three a row: fits a phone, and on stage (beside
# the lanes, in 1.5x text, it was taller than a few lanes and its last entry was cut)


def timeline_chart(df: pd.DataFrame, request_ids: list[str], max_step: int) -> alt.Chart:
    """One lane per request, one cell per step, coloured by its state (waiting, preempted, ...).

    Input columns (timeline_frame): step, request_id, state, cached_tokens, blocks.
    """
    return alt.Chart(df).mark_rect(stroke="white", strokeWidth=0.5).encode(
        x=alt.X("step:O", title="step (forward pass)", scale=alt.Scale(domain=list(range(1, max_step + 1))),
                axis=alt.Axis(values=list(range(1, max_step + 1, max(1, max_step // 20))), labelAngle=0)),
        y=alt.Y("request_id:N", title="request", scale=alt.Scale(domain=request_ids)),
        color=alt.Color("state:N", title="state", scale=alt.Scale(
            domain=list(REQUEST_STATE_COLORS), range=list(REQUEST_STATE_COLORS.values())),
            legend=alt.Legend(orient="bottom", columns=STATE_COLUMNS)),
        tooltip=["step:O", "request_id:N", "state:N", alt.Tooltip("cached_tokens:Q", title="tokens cached"),
                 "blocks:Q"],
    ).properties(height=alt.Step(22), autosize=FIT_WIDTH)  # the chart grows with its legend's rows


def reuse_frame(result) -> pd.DataFrame:
    """Columns: request_id, part, tokens: each prompt split into reused and computed tokens."""
    rows = []
    for r in result.requests:
        rows += [{"request_id": r.request_id, "part": "reused from cached blocks", "tokens": r.prefix_tokens_reused},
                 {"request_id": r.request_id, "part": "computed", "tokens": r.prompt_tokens - r.prefix_tokens_reused}]
    return pd.DataFrame(rows, columns=["request_id", "part", "tokens"])


def reuse_chart(df: pd.DataFrame) -> alt.Chart:
    """Stacked bars per request: prompt tokens reused from a cached prefix vs computed in prefill.

    Input columns (reuse_frame): request_id, part, tokens.
    """
    return alt.Chart(df).mark_bar().encode(
        y=alt.Y("request_id:N", title="request"),
        x=alt.X("tokens:Q", title="prompt tokens", stack="zero"),
        color=alt.Color("part:N", title=None, scale=alt.Scale(domain=list(REUSE_COLORS),
                                                               range=list(REUSE_COLORS.values())),
                        legend=alt.Legend(orient="bottom")),
        order=alt.Order("part:N", sort="descending"),
        tooltip=["request_id:N", "part:N", "tokens:Q"],
    ).properties(height=alt.Step(22))


def requests_frame(result) -> pd.DataFrame:
    """Columns: request_id, prompt_tokens, reused_tokens, new_tokens, queued_ms, ttft_ms, total_ms."""
    return pd.DataFrame([{"request_id": r.request_id, "prompt_tokens": r.prompt_tokens,
                          "reused_tokens": r.prefix_tokens_reused, "new_tokens": len(r.output_ids),
                          "queued_ms": r.queued_ms, "ttft_ms": r.ttft_ms, "total_ms": r.total_ms}
                         for r in result.requests])
