"""The Live page's charts are one registry (kvviz.live.charts.CHARTS): one entry gives a chart its
data, its builder, its panel, its heights and its report section, so adding a chart is one entry."""
from __future__ import annotations

import dataclasses

import altair as alt
import pytest
from tests.live.test_report import hand_trace

from kvviz.live import charts as live_charts
from kvviz.live import report


def test_every_chart_has_a_panel_with_a_title_and_every_panel_a_chart():
    panels = {c.panel for c in live_charts.CHARTS}
    assert panels == set(live_charts.PANELS)
    assert len({c.name for c in live_charts.CHARTS}) == len(live_charts.CHARTS)


def test_the_page_rows_hold_every_chart_once():
    rows = live_charts.panel_rows(race=False) + live_charts.panel_rows(race=True)
    names = [name for row in rows for _, charts in row for name in charts]
    assert sorted(names) == sorted(c.name for c in live_charts.CHARTS)
    assert all(len(row) <= 2 for row in rows)


def test_report_captions_sit_under_each_panels_last_chart():
    assert live_charts.panel_caption_charts() == {"layers": "layers", "total": "total", "blocks": "reservation",
                                                  "timings": "layer_times", "race": "race",
                                                  "positions": "positions"}


@pytest.fixture
def one_more_chart(monkeypatch):
    """A chart added the way a developer adds one: a single LiveChart entry."""
    extra = live_charts.LiveChart(
        name="tokens_per_step", panel="timings", height=111, presenter_height=222,
        data=lambda meta, cached, steps: steps[["step", "mode", "step_ms"]],
        build=lambda meta, n, df: alt.Chart(df).mark_line().encode(x="step:Q", y="step_ms:Q"),
        report_title="Tokens per step, a chart added in one place")
    monkeypatch.setattr(live_charts, "CHARTS", live_charts.CHARTS + (extra,))
    return extra


def test_one_entry_adds_a_chart_to_the_page_and_the_report(one_more_chart):
    t = hand_trace()
    cached, recompute = t.events_of("cached"), t.events_of("recompute")
    data = live_charts.chart_data(t.meta, cached, recompute)
    assert one_more_chart.name in live_charts.build_charts(t.meta, len(cached), data)
    assert ("timings", ["steps", "layer_times", "tokens_per_step"]) in live_charts.panel_rows(race=False)[1]
    assert live_charts.heights(presenting=True)["tokens_per_step"] == 222
    assert "tokens_per_step" in report.report_charts(t)
    assert "Tokens per step, a chart added in one place" in report.html_report(t)


def test_a_race_chart_leaves_a_report_without_a_no_cache_run():
    t = hand_trace()
    cached_only = dataclasses.replace(t, events=t.events_of("cached"))
    assert not {c.name for c in live_charts.CHARTS if c.race} & set(report.report_charts(cached_only))
