"""The Replay page: example traces, uploads, bad files, scrubbing. No model is loaded."""
import dataclasses
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.core import assets
from kvviz.core.trace import Trace

pytestmark = pytest.mark.slow  # runs the Replay page (Streamlit AppTest): make test, not make check

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = sorted(assets.TRACES.glob("*.json"))[0]


@pytest.fixture()
def page():
    return AppTest.from_file(str(ROOT / "app_pages" / "replay.py"), default_timeout=120)


def metrics(at) -> dict:
    """The headline cards' figures (the first of each label: a hidden copy of the row may follow)."""
    shown: dict = {}
    for m in at.metric:
        shown.setdefault(m.label, m.value)
    return shown


def test_example_trace_draws_every_panel(page):
    at = page.run()
    assert not at.exception and not at.error
    figures = metrics(at)
    trace = Trace.load(EXAMPLE)
    assert figures["Tokens"] == f"{len(trace.events_of('cached'))} × {trace.meta.batch}"
    assert figures["KV cache (measured)"] == figures["Formula (computed)"]
    assert figures["Tokens/s (wall clock)"] == "–"  # a replay's pace is not the run's
    assert len(at.get("vega_lite_chart")) >= 6
    # the answer box ends on its last visible character (the example's answer ends in a newline)
    assert "".join(e.texts[0] for e in trace.events_of("cached")).rstrip() in [c.value for c in at.code]


def test_scrubber_shows_an_earlier_step(page):
    at = page.run()
    at.slider(key="replay_step").set_value(5).run()
    assert metrics(at)["Tokens"].startswith("5 ×")


SHORT_STEPS = 12  # the playback tests replay the example's first steps: every step is a script run


@pytest.fixture()
def short_trace(monkeypatch) -> Trace:
    """The example cut to its first SHORT_STEPS steps (both runs), as if that were the file read."""
    import kvviz.replay.panel
    whole = Trace.load(EXAMPLE)
    short = dataclasses.replace(whole, events=[e for e in whole.events if e.step < SHORT_STEPS])
    monkeypatch.setattr(kvviz.replay.panel, "read_trace", lambda path, upload: short)
    return short


def test_play_instantly_ends_on_the_last_step(page, short_trace):
    at = page.run()
    at.select_slider(key="replay_speed").set_value("instant").run()
    at.button(key="replay_play").click().run()
    assert not at.exception
    assert metrics(at)["Tokens"].startswith(f"{SHORT_STEPS} ×")


def test_play_draws_each_step_whole_from_the_scrubbed_step(page, monkeypatch, short_trace):
    """Every script run of a playback draws one step, and the slider reads it: the panels get the
    events through the slider's step, all at once (final), never a partial redraw."""
    from kvviz.live import view_panel
    drawn = []  # (cached steps shown, final) for each redraw of the panels
    update = view_panel.LiveView.update
    monkeypatch.setattr(view_panel.LiveView, "update", lambda self, trace, final=False: (
        drawn.append((len(trace.events_of("cached")), final)), update(self, trace, final))[1])
    at = page.run()
    at.select_slider(key="replay_speed").set_value("instant").run()
    at.slider(key="replay_step").set_value(5).run()
    drawn.clear()
    at.button(key="replay_play").click().run()
    assert not at.exception
    steps = len(short_trace.events_of("cached"))
    assert steps == SHORT_STEPS and drawn == [(step, True) for step in range(5, steps + 1)]  # one whole step per run
    assert at.slider(key="replay_step").value == steps  # the scrubber followed to where play ended
    assert at.button(key="replay_play").label == "Play"  # ended: paused
    drawn.clear()
    at.button(key="replay_play").click().run()  # at the end: play from the start
    assert drawn[0] == (1, True) and drawn[-1] == (steps, True)
    assert "◀ slower" in [c.value for c in at.caption] and "faster ▶" in [c.value for c in at.caption]


def test_pause_sends_the_slider_the_step_the_panels_show(page):
    """A Pause click can leave the browser while a playing run's later step is on its way to the
    slider: the paused run must send the slider its step again (set_value), or the slider stays on
    the later step while every panel shows the one the click carried (seen under CI's load)."""
    at = page.run()
    at.session_state["replay_playing"] = True  # mid-play, as the click finds it
    at.slider(key="replay_step").set_value(29)
    at.button(key="replay_play").click().run()
    slider = at.slider(key="replay_step")
    assert at.button(key="replay_play").label == "Play" and metrics(at)["Tokens"].startswith("29 ×")
    assert slider.proto.set_value and list(slider.proto.value) == [29]


def test_the_step_buttons_move_the_scrubber_one_step(page):
    at = page.run()
    at.slider(key="replay_step").set_value(10).run()
    at.button(key="replay_back").click().run()
    assert at.slider(key="replay_step").value == 9 and metrics(at)["Tokens"].startswith("9 ×")
    at.button(key="replay_forward").click().run()
    at.button(key="replay_forward").click().run()
    assert at.slider(key="replay_step").value == 11 and metrics(at)["Tokens"].startswith("11 ×")


def hostile_trace() -> str:
    doc = json.loads(EXAMPLE.read_text())
    doc["events"][0]["texts"] = ["<script>alert(1)</script> **bold** <b>x</b>"]
    return json.dumps(doc)


def test_trace_text_is_shown_inert():
    trace = Trace.from_json(hostile_trace())
    assert trace.events[0].texts[0].startswith("<script>")
    at = AppTest.from_function(_replay_text, args=(hostile_trace(),), default_timeout=60).run()
    assert not at.exception
    assert any("<script>alert(1)</script> **bold**" in c.value for c in at.code)
    assert not any("<script>" in m.value for m in at.markdown)


def _replay_text(text):
    from kvviz.live import panel
    from kvviz.core.trace import Trace
    panel.replay(Trace.from_json(text), False)


class Upload:
    """What st.file_uploader hands the page: a size and the bytes."""

    def __init__(self, data: bytes):
        self.data, self.size = data, len(data)

    def getvalue(self) -> bytes:
        return self.data


def future_version() -> bytes:
    doc = json.loads(EXAMPLE.read_text())
    doc["version"] = 99
    return json.dumps(doc).encode()


def without_meta() -> bytes:
    doc = json.loads(EXAMPLE.read_text())
    doc["meta"] = {}
    return json.dumps(doc).encode()


@pytest.mark.parametrize("data, message", [
    (b"\x89PNG not json", "not UTF-8 text"),
    (b"{\"format\": ", "not JSON"),
    (EXAMPLE.read_bytes()[: EXAMPLE.stat().st_size // 2], "truncated"),
    (b"", "empty"),
    (future_version(), "newer kvviz"),
    (without_meta(), "lacks whole numbers"),
])
def test_bad_uploads_get_clear_errors(data, message):
    from kvviz.replay import panel
    from kvviz.core.trace import TraceError
    with pytest.raises(TraceError, match=message):
        panel.read_trace(None, Upload(data))


def test_oversized_upload_refused_before_parsing(monkeypatch):
    from kvviz.core import trace as trace_mod
    from kvviz.app import ui
    from kvviz.replay import panel
    monkeypatch.setattr(ui, "MAX_TRACE_BYTES", 1000)
    with pytest.raises(trace_mod.TraceError, match="limited to"):
        panel.read_trace(None, Upload(b"x" * 5000))


def test_hosted_uploads_have_a_smaller_limit(monkeypatch):
    from kvviz.replay import panel
    from kvviz.core.trace import TraceError
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    with pytest.raises(TraceError, match="limited to 8 MiB here"):
        panel.read_trace(None, Upload(b" " * (9 * 2**20)))


def test_trace_origin_line_escapes_the_model_label():
    import msgspec
    from kvviz.replay import panel
    trace = Trace.load(EXAMPLE)
    trace.meta = msgspec.structs.replace(trace.meta, model_label="[phish](https://example.invalid)")
    assert "\\[phish\\]\\(https\\:\u2060//example\\.invalid\\)" in panel.trace_origin(trace)  # no link, bare or not
