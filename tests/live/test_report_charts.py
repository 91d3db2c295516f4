"""The run report's charts (kvviz.live.report_charts): the Live page's charts over a whole run, the
cache map first and without hover, a race chart only with a no-cache run, a huge heatmap left out;
pure, on the hand-built trace of test_report.py."""
from __future__ import annotations

import dataclasses
import json

import pytest

from kvviz.core.trace import Trace
from kvviz.live import charts as live_charts
from kvviz.live import report
from kvviz.live import report_charts
from kvviz.viz.report_page import CHART_WIDTH
from tests.live.test_report import chart_names, hand_trace


def test_a_trace_without_run_meta_draws_no_chart():
    assert not report_charts.drawable(Trace()) and report_charts.report_charts(Trace()) == {}
    assert report_charts.drawable(hand_trace())


def test_the_cache_map_comes_first_as_a_still_and_the_grid_keeps_square_cells():
    """A file has no hover: the report's cache map has no selection; every chart is CHART_WIDTH
    wide except the block grid, whose cells stay square (a 14 px step)."""
    out = report_charts.report_charts(hand_trace())
    assert list(out)[0] == "cache_map" and "attention" not in out  # the hand trace recorded no attention
    cache_map = report_charts.sized("cache_map", out["cache_map"])
    assert cache_map["width"] == CHART_WIDTH and "params" not in json.dumps(cache_map)
    assert report_charts.sized("grid", out["grid"])["width"] == {"step": 14}


def test_a_race_chart_leaves_a_report_without_a_no_cache_run():
    t = hand_trace()
    cached_only = dataclasses.replace(t, events=t.events_of("cached"))
    assert not {c.name for c in live_charts.CHARTS if c.race} & set(report_charts.report_charts(cached_only))


@pytest.mark.slow
def test_a_huge_heatmap_is_left_out_with_a_note(monkeypatch):
    monkeypatch.setattr(report_charts, "MAX_HEATMAP_CELLS", 5)  # the hand trace has 3 x 2 decode cells
    t = hand_trace()
    assert "layer_times" not in chart_names(t)
    doc = report.html_report(t, svg=lambda vega: "<svg></svg>")
    assert "heatmap is left out: its 6 cells" in doc
