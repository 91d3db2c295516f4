"""The stage pages' keyboard shortcuts (kvviz.app.keys): the "?" list of a page's keys, kvviz's own
escaped text, hidden until asked for; and P, the hidden pace button, stepping the pace widgets to the
next pace."""
from html import escape

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.app import keys


def test_the_live_list_names_every_key_of_the_page_and_starts_hidden():
    overlay = keys.help_overlay("Live")
    for key, what in (*keys.PAGE_KEYS["Live"], ("?", "This list")):
        assert f"<tr><td><kbd>{key}</kbd></td><td>{escape(what)}</td></tr>" in overlay
    assert '<div id="kvviz-keys" role="dialog" aria-modal="true" aria-label="Keyboard shortcuts" hidden>' in overlay
    assert overlay.startswith(keys.OVERLAY_CSS) and overlay.endswith(keys.TOGGLE_SCRIPT)
    assert "Keys on the Live page" in overlay


def test_the_replay_list_shows_arrows_for_the_arrow_keys_and_a_page_without_keys_gets_nothing():
    overlay = keys.help_overlay("Replay")
    assert "<kbd>←</kbd></td><td>One step back" in overlay and "<kbd>→</kbd></td><td>One step forward" in overlay
    assert "<kbd>Left</kbd>" not in overlay and "<kbd>K</kbd></td><td>Play / Pause" in overlay
    assert keys.help_overlay("Planner") == "" and keys.help_overlay("") == ""


def test_the_list_escapes_what_it_shows(monkeypatch):
    monkeypatch.setitem(keys.PAGE_KEYS, "<b>Page</b>", (("<", "a & <i>b</i>"),))
    overlay = keys.help_overlay("<b>Page</b>")
    assert "Keys on the &lt;b&gt;Page&lt;/b&gt; page" in overlay
    assert "<kbd>&lt;</kbd></td><td>a &amp; &lt;i&gt;b&lt;/i&gt;" in overlay and "<i>" not in overlay


def pace_page():
    import streamlit as st

    from kvviz.app import keys

    paces = ["real time", "slow ×4", "slow ×10"]
    current = st.session_state.setdefault("pace", "slow ×4")
    st.session_state.setdefault("sidebar-pace", current)
    keys.pace_key(paces, current, ("pace", "sidebar-pace"))
    st.text(f"shown: {st.session_state['pace']} / {st.session_state['sidebar-pace']}")


@pytest.mark.slow
def test_p_steps_every_pace_widget_to_the_next_pace_and_wraps_around():
    at = AppTest.from_function(pace_page, default_timeout=30).run()
    assert not at.exception and at.button(key="pace-next").proto.shortcut.upper() == keys.PACE
    at.button(key="pace-next").click().run()
    assert at.text[0].value == "shown: slow ×10 / slow ×10" and keys.PACE_PRESSED not in at.session_state
    at.button(key="pace-next").click().run()
    assert at.text[0].value == "shown: real time / real time"  # past the last: the first again
