"""The run report's charts: the Live page's charts over the whole run (kvviz.live.charts, the one
chart registry) and the cache map at the last step, as Altair charts for kvviz.live.report to
draw as inline SVG. Pure; no streamlit."""
from __future__ import annotations

import altair as alt

from kvviz.live import cache_map, cache_map_charts, charts
from kvviz.core.events import StepEvent
from kvviz.core.meta import RunMeta
from kvviz.core.trace import Trace, TraceError, check_run_meta
from kvviz.viz.report_page import CHART_WIDTH

MAX_HEATMAP_CELLS = 30_000  # a layer-time heatmap beyond this would weigh megabytes of SVG


def drawable(trace: Trace) -> bool:
    """Whether the trace holds the facts the live page's charts and captions quote."""
    try:
        check_run_meta(trace)
    except TraceError:
        return False
    return True


def report_charts(trace: Trace) -> dict[str, alt.TopLevelMixin]:
    """The live page's charts over the whole run (kvviz.live.charts); none without run meta."""
    if not drawable(trace):
        return {}
    cached, recompute = trace.events_of("cached"), trace.events_of("recompute")
    data = charts.chart_data(trace.meta, cached, recompute)
    out = charts.build_charts(trace.meta, len(cached), data)
    if not recompute:
        out = {name: chart for name, chart in out.items() if name not in charts.RACE_PANELS}
    if not 0 < (data["layer_times"]["phase"] == "decode").sum() <= MAX_HEATMAP_CELLS:
        out.pop("layer_times")
    else:
        out["layer_times"] = out["layer_times"].properties(height=300)
    return {**cache_map_charts_of(trace.meta, cached), **out}


def cache_map_charts_of(meta: RunMeta, cached: list[StepEvent]) -> dict[str, alt.TopLevelMixin]:
    """The cache map at the last step (cells only: a file has no hover), and the attention map
    when the run recorded it. Token text never reaches these charts."""
    kinds = meta.specs
    args = (kinds, int(meta.max_len), cache_map.prompt_len(meta))
    cells = cache_map.map_frame(meta, cached)
    out = {"cache_map": cache_map_charts.cache_map_chart(cells[cells["row"] == "cell"], *args,
                                                          padded=meta.batch > 1, hover=False)}
    attention = cache_map.attention_frame(meta, cached).drop(columns=["text"])
    if not attention.empty:
        out["attention"] = cache_map_charts.attention_chart(attention, *args)
    return out


def sized(name: str, chart: alt.TopLevelMixin) -> dict:
    """The chart as a Vega-Lite dict with a fixed width (the grid keeps square cells)."""
    width = alt.Step(14) if name == "grid" else CHART_WIDTH
    return chart.properties(width=width).to_dict()
