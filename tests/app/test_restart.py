"""A tab left open across a server restart (kvviz.app.restart): the fixed script's own promises,
read from it, and its place in every page's one stylesheet element. The script at work in Chromium
(the banner, one reload, no second within 30 s) is tested beside the hosted server it needs, in
tests/app/test_uploads.py::test_a_tab_open_across_a_restart_is_told_and_reloads_once."""
import pytest
from streamlit.testing.v1 import AppTest

from kvviz.app import restart
from kvviz.app.restart import RELOAD_AFTER_MS, RELOAD_SCRIPT


def test_the_script_reloads_once_after_the_banner_and_not_again_within_30_s():
    assert RELOAD_SCRIPT.startswith("<script>") and RELOAD_SCRIPT.rstrip().endswith("</script>")
    assert RELOAD_SCRIPT.count("<script") == 1
    assert "RELOAD_AFTER_MS" not in RELOAD_SCRIPT  # the delay was written in
    assert f"setTimeout(() => location.reload(), {RELOAD_AFTER_MS})" in RELOAD_SCRIPT and RELOAD_AFTER_MS >= 500
    assert 'addEventListener("vite:preloadError"' in RELOAD_SCRIPT and "event.preventDefault()" in RELOAD_SCRIPT
    assert "if (window.kvvizReloadOnRestart) return;" in RELOAD_SCRIPT  # one listener however many reruns
    assert "Date.now() - last > 30000" in RELOAD_SCRIPT
    assert "reloading this page…" in RELOAD_SCRIPT and "reload this page to go on." in RELOAD_SCRIPT
    assert "innerHTML" not in RELOAD_SCRIPT and "textContent" in RELOAD_SCRIPT  # the banner is text


def styled_page():
    from kvviz.app import ui

    ui.presenter_style("Live")


@pytest.mark.slow
def test_every_page_carries_it_inside_its_one_style_element():
    at = AppTest.from_function(styled_page, default_timeout=60).run()
    bodies = [h.proto.body for h in at.get("html")]
    assert not at.exception and len(bodies) == 1  # a second element would add a gap at the top
    assert bodies[0].count(restart.RELOAD_SCRIPT) == 1
