"""Presenter mode headless: when a page is on stage (kvviz.app.stage), chart text scaled, the stage
layout and its pace control, fixed styles.

What it looks like on a projector is checked in Chromium (tests/browser/test_pages.py).
"""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.viz import charts
from kvviz.app import stage, ui
from kvviz.live import settings_panel

pytestmark = pytest.mark.slow  # runs the Live page in presenter mode (Streamlit AppTest): make test, not make check

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def stage_page():
    import streamlit as st

    from kvviz.app import stage

    st.text(f"on stage: {stage.presenter_mode()}")


def test_a_page_is_on_stage_by_make_present_or_by_its_url(monkeypatch):
    monkeypatch.delenv("KVVIZ_PRESENT", raising=False)
    at = AppTest.from_function(stage_page, default_timeout=30).run()
    assert at.text[0].value == "on stage: False"
    at.query_params["present"] = "0"
    assert at.run().text[0].value == "on stage: False"
    at.query_params["present"] = "1"
    assert at.run().text[0].value == "on stage: True"
    monkeypatch.setenv("KVVIZ_PRESENT", "1")  # make present
    assert stage.presenter_mode() and AppTest.from_function(stage_page, default_timeout=30).run().text[0].value == (
        "on stage: True")


def test_with_font_scale_enlarges_every_kind_of_chart_text():
    vega = {"mark": "bar", "config": {"axis": {"grid": False}}}
    scaled = charts.with_font_scale(vega, 1.5)
    on_screen = {part: {key: int(value["expr"].rsplit(" : ", 1)[1]) if isinstance(value, dict) else value
                        for key, value in config.items()} for part, config in scaled["config"].items()}
    assert on_screen["axis"] == {"grid": False, "labelFontSize": 18, "titleFontSize": 18, "labelLimit": 270}
    assert on_screen["legend"]["labelFontSize"] == 21 and on_screen["text"]["fontSize"] == 16  # (a phone:
    # the usual sizes, tests/viz/test_charts.py)
    assert vega == {"mark": "bar", "config": {"axis": {"grid": False}}}  # not mutated
    assert charts.with_font_scale(vega, 1.0) is vega


def test_stage_layout_runs_with_pace_beside_generate(tiny_dir, monkeypatch):
    monkeypatch.setenv("KVVIZ_MODEL", str(tiny_dir))
    for name in ("KVVIZ_PRESENT", "KVVIZ_HOSTED", "KVVIZ_HOSTED_MODELS"):
        monkeypatch.delenv(name, raising=False)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["present"] = "1"
    at.query_params["max_new"] = "6"
    at.run()
    assert not at.exception
    assert at.selectbox(key="stage_pace").options == list(settings_panel.PACES)
    assert not at.expander or all("What am I looking at" not in e.label for e in at.expander)
    assert any(ui.PRESENTER_CSS in h.proto.body for h in at.get("html"))
    at.button(key="generate").click().run()
    assert not at.exception and not at.error
    cached, recompute = [c.value for c in at.main.code]
    assert cached.strip() and cached.startswith(recompute.strip())
    assert any(c.value.startswith("Stopped when the cached run finished") or c.value.startswith("Finished:")
               for c in at.caption)
    assert any(s.value.startswith("Same tokens") and "so far" not in s.value for s in at.success)
