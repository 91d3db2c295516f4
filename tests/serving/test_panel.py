"""The serving page (kvviz.serving.panel, drawn by app_pages/serving.py): its pure captions and
settings, and the page headless with AppTest on the tiny model (three requests run and replayed, a
pool too small refused)."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.serving import panel
from tests.serving.test_compute import PROMPTS

PAGE = str(Path(__file__).resolve().parents[2] / "app_pages" / "serving.py")


def test_the_grid_caption_labels_a_modelled_pool_and_the_summary_counts_the_requests():
    real, modelled = panel.grid_caption(16, "real"), panel.grid_caption(4, "modelled")
    assert "one block of 16 token slots" in real and "Modelled" not in real
    assert "one block of 4 token slots" in modelled and "**Modelled** with kvviz.core.blocks" in modelled
    settings = panel.Settings(prompts_text="a\n\n  \nb\nc", share=False, system="sys", num_blocks=64, block_size=4,
                              max_new=6, every=2, delay_ms=0)
    assert panel.summary(settings).startswith("3 requests · pool of 64 blocks of 4 tokens · 6 new tokens each")
    assert settings.shared_system() == "" and panel.Settings(**{**vars(settings), "share": True}).shared_system() == "sys"


@pytest.fixture
def page(tiny_dir, monkeypatch) -> AppTest:
    monkeypatch.setenv("KVVIZ_MODEL", str(tiny_dir))
    app = AppTest.from_file(PAGE, default_timeout=120)
    app.run()
    assert not app.exception, app.exception
    return app


@pytest.mark.slow
def test_page_runs_three_requests_and_replays_them(page):
    assert any("Press **Run**" in i.value for i in page.info)
    page.text_area(key="srv_requests").set_value("\n".join(PROMPTS))
    page.toggle(key="srv_share").set_value(False)
    page.number_input(key="srv_blocks").set_value(64)
    page.select_slider(key="srv_block_size").set_value(4)
    page.slider(key="srv_max_new").set_value(6)
    page.slider(key="srv_delay").set_value(0)
    page.button(key="srv_run").click().run()
    assert not page.exception, page.exception
    assert not page.error
    assert len(page.get("vega_lite_chart")) == 4  # grid, usage, lanes, prefix reuse
    labels = {m.label: m.value for m in page.metric}
    assert labels["Peak blocks in use"].endswith("/ 64")
    assert len(page.main.code) == 3  # each output verbatim, never as Markdown (the sidebar: the link)
    page.slider(key="srv_step_1").set_value(1).run()  # scrub back to the first step
    assert not page.exception and any(c.value.startswith("Step 1 ·") for c in page.caption)


@pytest.mark.slow
def test_page_refuses_a_pool_too_small(page):
    page.text_area(key="srv_requests").set_value("\n".join(PROMPTS))
    page.toggle(key="srv_share").set_value(False)
    page.number_input(key="srv_blocks").set_value(4)
    page.select_slider(key="srv_block_size").set_value(4)
    page.button(key="srv_run").click().run()
    assert not page.exception
    assert any("enlarge the pool" in e.value for e in page.error)
    assert not page.get("vega_lite_chart")
