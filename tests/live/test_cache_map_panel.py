"""The cache-map panel (kvviz.live.cache_map_panel): its captions, and the map and attention map it
draws on the Live and Replay pages, headless (AppTest, tiny local model)."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvviz.live import cache_map as cm
from kvviz.live import cache_map_panel
from metas import meta_of
from tests.live.test_cache_map import META, run

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.fixture
def at(tiny_dir, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("KVVIZ_MODEL", str(tiny_dir))
    for name in ("KVVIZ_PRESENT", "KVVIZ_HOSTED", "KVVIZ_HOSTED_MODELS"):
        monkeypatch.delenv(name, raising=False)
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    app.run()
    assert not app.exception
    app.slider(key="max_new").set_value(6)
    return app


def map_vegas_on_page(at) -> list[dict]:
    """The cache-map panel's charts (their Vega-Lite dicts), in page order."""
    vegas = [json.loads(c.proto.spec) for c in at.main.get("vega_lite_chart")]
    return [s for s in vegas if '"pos_start"' in json.dumps(s)]


@pytest.mark.slow
def test_the_live_page_draws_the_map_and_with_the_toggle_the_attention_map(at):
    at.button(key="generate").click().run()
    assert not at.exception and not at.error
    assert len(map_vegas_on_page(at)) == 1  # attention is off by default
    caption = " ".join(c.value for c in at.caption)
    assert "positions cached after step 5" in caption and "All 2 layers are full attention" in caption
    at.toggle(key="attention").set_value(True).run()
    at.button(key="generate").click().run()
    assert not at.exception and not at.error, at.error
    maps = map_vegas_on_page(at)
    assert len(maps) == 2 and "share" in json.dumps(maps[1])
    assert "eager" in " ".join(c.value for c in at.caption)


@pytest.mark.slow
def test_a_batch_gets_a_row_picker_once_the_run_is_over(at):
    at.slider(key="batch").set_value(2)
    at.button(key="generate").click().run()
    assert not at.exception
    picker = at.selectbox(key="cache_map_row-2")
    assert picker.options == ["sequence 1 of 2", "sequence 2 of 2"]
    picker.set_value(1).run()
    assert not at.exception
    assert "Showing sequence 2 of 2" in " ".join(c.value for c in at.caption)


def test_an_unreadable_cache_draws_no_cells_and_says_so():
    ev = replace(run(META, 2, [None, 3])[-1], cache_note="kvviz cannot read cache layers of class X")
    assert cm.cells_frame(META, ev).empty
    assert "could not read this cache" in cache_map_panel.caption(meta_of(META, batch=1), ev, 0, True)


@pytest.mark.slow
def test_replay_draws_the_map_of_the_step_the_scrubber_names():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app_pages" / "replay.py"), default_timeout=120).run()
    assert not at.exception and not at.error
    assert len(map_vegas_on_page(at)) == 1
    at.slider(key="replay_step").set_value(5).run()
    caption = " ".join(c.value for c in at.caption)
    assert "after step 4;" in caption  # the scrubber's 5th cached step is step 4
