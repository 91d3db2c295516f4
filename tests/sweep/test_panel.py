"""The sweep page (kvviz.sweep.panel, drawn by app_pages/sweep.py) headless with AppTest: a two-point
sweep on the tiny model, measured once and reused, and the host's caps on a hosted page."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.sweep import compute as sweep
from kvviz.sweep import panel
from tests.sweep.test_compute import ok_row

PAGE = str(Path(__file__).resolve().parents[2] / "app_pages" / "sweep.py")


def test_the_results_tables_label_what_they_show_in_two_tables_of_at_most_eight_columns():
    """Every column the page's two results tables show is one of the sweep's frame, with a label;
    the sizes table and the rest each fit 8 columns (14 in one table cut its last at 1280 px)."""
    frame = sweep.rows_frame([ok_row(64, 1)])
    assert set(panel.RESULT_COLUMNS) <= set(frame.columns)
    assert set(panel.SIZE_COLUMNS) <= set(panel.RESULT_COLUMNS) and len(panel.SIZE_COLUMNS) <= 8
    assert len(set(panel.RESULT_COLUMNS) - set(panel.SIZE_COLUMNS)) <= 8
    assert set(panel.CUDA_ONLY) <= set(panel.RESULT_COLUMNS) - set(panel.SIZE_COLUMNS)


@pytest.mark.slow
def test_page_runs_a_two_point_sweep_and_reuses_it(tiny_dir, monkeypatch):
    monkeypatch.setenv("KVVIZ_MODEL", str(tiny_dir))
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.run()
    assert not at.exception and any("Run sweep" in i.value for i in at.info)
    at.multiselect(key="sweep_prompts").set_value([16, 32])
    at.multiselect(key="sweep_batches").set_value([1])
    at.slider(key="sweep_new").set_value(3)
    at.button(key="sweep_run").click().run()
    assert not at.exception, at.exception
    (rows,) = at.session_state["sweeps"].values()
    assert [(r.prompt_tokens, r.status) for r in rows] == [(16, "ok"), (32, "ok")]
    assert len(at.get("vega_lite_chart")) == 5
    assert at.get("download_button")
    monkeypatch.setattr(sweep, "run_point", lambda *a, **k: pytest.fail("re-measured"))
    at.button(key="sweep_run").click().run()
    assert not at.exception
    assert any("already measured" in i.value for i in at.info)
    assert len(at.get("vega_lite_chart")) == 5


@pytest.mark.slow
def test_hosted_page_applies_the_hosts_caps(monkeypatch, default_lm):
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    monkeypatch.delenv("KVVIZ_MODEL", raising=False)
    at = AppTest.from_file(PAGE, default_timeout=180).run()
    assert not at.exception
    assert max(at.multiselect(key="sweep_prompts").options, key=int) == "1024"
    assert at.multiselect(key="sweep_batches").options == ["1", "2", "4"]
    assert at.slider(key="sweep_new").max == 128
    at.multiselect(key="sweep_prompts").set_value([16, 32, 64, 128, 256])
    at.multiselect(key="sweep_batches").set_value([1, 2]).run()  # 10 points, the host allows 8
    assert at.button(key="sweep_run").disabled
    assert any("at most 8 points" in w.value for w in at.warning)
