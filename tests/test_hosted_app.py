"""The live page in hosted mode (KVVIZ_HOSTED=1) on the real default model."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")


@pytest.fixture()
def hosted(monkeypatch, default_lm):  # default_lm: the model is converted before the page loads it
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    monkeypatch.delenv("KVVIZ_MODEL", raising=False)
    return AppTest.from_file(APP, default_timeout=180).run()


def test_hosted_sidebar_offers_only_the_allowlist_and_caps(hosted):
    at = hosted
    assert not at.exception
    assert at.selectbox(key="model").options == ["default"]
    assert not [w for w in at.text_input if w.key == "model"]  # no free-form model names
    assert not [w for w in at.selectbox if w.key in ("device", "dtype")]
    assert at.slider(key="max_new").max == 128 and at.slider(key="batch").max == 4
    assert at.expander[0].label == "What am I looking at?"


def test_hosted_generation_runs_and_long_prompts_are_refused(hosted):
    at = hosted
    at.slider(key="max_new").set_value(3).run()
    at.button(key="generate").click().run()
    assert not at.exception and not at.error
    assert {m.label: m.value for m in at.metric}["Tokens"] == "3 × 1"
    at.selectbox(key="preset").set_value("Free text").run()
    at.text_area(key="prompt-Free text").set_value("word " * 1500).run()
    at.button(key="generate").click().run()
    assert any("allows 1024" in e.value for e in at.error)
