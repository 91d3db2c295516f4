"""The Live page's charts are one registry (kvviz.live.charts.CHARTS): one entry gives a chart its
data, its builder, its panel, its heights and its report section, so adding a chart is one entry."""
from __future__ import annotations

import altair as alt
import pytest
from tests.live.test_report import hand_trace

from kvviz.live import charts as live_charts
from kvviz.live import report
from kvviz.live import report_charts


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
        data=lambda meta, cached, recompute, steps: steps[["step", "mode", "step_ms"]],
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
    assert "tokens_per_step" in report_charts.report_charts(t)
    assert "Tokens per step, a chart added in one place" in report.html_report(t)


def long_prompt_run(tokens: int = 29, finished: bool = True, recompute_steps: int = 2):
    """The case on stage: a 1,984-token prompt, 64 new tokens allowed, the answer ending at EOS
    after `tokens`; the run without a cache cut short after `recompute_steps`."""
    from dataclasses import replace

    from tests.live.test_captions import META, event, recompute_event

    from metas import meta_of
    prompt = 1984
    cached = [event(0, prompt + 1, 2000.0)] + [event(i, prompt + 1 + i, 20.0) for i in range(1, tokens)]
    cached[-1] = replace(cached[-1], finished=(finished,))
    recompute = [recompute_event(i, prompt + 1 + i, 2000.0 + 40 * i) for i in range(recompute_steps)]
    return meta_of(META, config={"max_new_tokens": 64}), cached, recompute


def test_the_race_axis_ends_at_the_last_token_and_the_remainder_ends_at_the_headline_figure():
    """The answer ended at 29 (EOS) of 64 allowed: the race charts' x axis ends at 29, not 64, and
    the no-cache run's modelled remainder runs from its last measured step to token 29, ending
    at the whole-run ratio the headline quotes (the positions: counted at each length)."""
    from kvviz.live import captions

    meta, cached, recompute = long_prompt_run()
    data = live_charts.chart_data(meta, cached, recompute)
    assert data["race"] is not None and data["race"].equals(data["positions"])
    df = data["race"]
    assert df[df.series == "axis"].new_tokens.tolist() == [29]
    rest = df[df.series == "modelled"]
    assert rest.new_tokens.tolist() == list(range(2, 30)) and set(rest["mode"]) == {"recompute"}
    cached_ms = df[(df.series == "measured") & (df["mode"] == "cached")].elapsed_ms.iloc[-1]
    cost = captions.no_cache_cost(cached, recompute)
    assert rest.elapsed_ms.iloc[-1] / cached_ms == pytest.approx(cost.run_ratio)
    assert captions.fmt_run_ratio(cost) == f"≈ {rest.elapsed_ms.iloc[-1] / cached_ms:.1f}×"
    assert rest.positions_total.iloc[-1] == sum(e.seq_len - 1 for e in cached)  # every step reads all
    vega = live_charts.build_charts(meta, 64, data)["race"].to_dict()
    assert vega["layer"][0]["layer"][0]["encoding"]["x"]["scale"] == {"domainMin": 0, "nice": False}  # not [0, 64]


def test_while_the_run_goes_on_the_race_axis_holds_the_budget_and_nothing_is_modelled():
    meta, cached, recompute = long_prompt_run(finished=False)
    df = live_charts.chart_data(meta, cached, recompute)["race"]
    assert df[df.series == "axis"].new_tokens.tolist() == [64] and not (df.series == "modelled").any()
    finished = long_prompt_run(tokens=29, recompute_steps=29)
    df = live_charts.chart_data(*finished)["race"]  # the run without a cache wrote every token
    assert not (df.series == "modelled").any() and df[df.series == "axis"].new_tokens.tolist() == [29]


@pytest.mark.parametrize("finished", [True, False])
def test_every_chart_s_frame_holds_every_column_its_chart_reads(finished):
    """Frames may be narrower than the steps frame (race_data keeps RACE_COLUMNS): never narrower
    than what their chart names (a missing field draws nothing, silently)."""
    from tests.viz.test_charts import fields_named
    from kvviz.viz import charts
    meta, cached, recompute = long_prompt_run(finished=finished)
    data = live_charts.chart_data(meta, cached, recompute)
    for name, chart in live_charts.build_charts(meta, 64, data).items():
        read = fields_named(charts.to_vega_lite(chart))
        assert read and read <= set(data[name].columns), (name, read - set(data[name].columns))
