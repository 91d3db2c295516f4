"""The live page's wiring, driven headless with Streamlit's AppTest on a tiny local model.

AppTest sees only the final element tree of each script run, so these tests check what a
finished (or refused) run leaves on the page, not the streaming itself (tests/browser/test_live.py
watches that in a real browser).
"""
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.live.stylesheet import DIM_HOLDER_CSS, KEEP_HEIGHT_CSS, PRELOAD_CSS, RACE_NOTES_CSS, RUN_CARD_CSS
from kvviz.live.panel import PRELOAD_DESCRIPTION
from kvviz.app.ui import PAGE_CSS, PRESENTER_CSS, inert
from kvviz.live.words import INTRO
from kvviz.app import keys
from kvviz.app.restart import RELOAD_SCRIPT

pytestmark = pytest.mark.slow  # runs the Live page (Streamlit AppTest) with model runs: make test, not make check

APP = str(Path(__file__).resolve().parents[2] / "app.py")
PROMPT = "prompt-Short question"  # the prompt text_area's key under the default preset
TOKEN_MARK = "│"


@pytest.fixture
def at(tiny_dir, monkeypatch) -> AppTest:
    """The app on the tiny model, first run done, 8 new tokens per run."""
    monkeypatch.setenv("KVVIZ_MODEL", str(tiny_dir))
    for name in ("KVVIZ_PRESENT", "KVVIZ_HOSTED", "KVVIZ_HOSTED_MODELS"):
        monkeypatch.delenv(name, raising=False)  # the full sidebar, not presenter or hosted mode
    app = AppTest.from_file(APP, default_timeout=60)
    app.run()
    assert not app.exception
    app.slider(key="max_new").set_value(8)
    return app


def generate(at: AppTest) -> AppTest:
    at.button(key="generate").click().run()
    assert not at.exception, at.exception
    return at


def metrics(at: AppTest) -> dict[str, str]:
    """The headline cards' figures: the first card of each label (the row's hidden copy, at its
    widest, follows it: kvviz.live.view_panel.metric_cards)."""
    shown: dict[str, str] = {}
    for m in cards(at):
        shown.setdefault(m.label, m.value)
    return shown


def cards(at: AppTest) -> list:
    """The page's figure cards, less the invisible one that preloads the card code."""
    return [m for m in at.metric if m.label != PRELOAD_DESCRIPTION]


def charts(at: AppTest) -> list:
    """The page's charts, less the invisible empty one that preloads the chart code."""
    return [c for c in at.main.get("vega_lite_chart") if PRELOAD_DESCRIPTION not in c.proto.spec]


def texts_everywhere(at: AppTest) -> list[str]:
    """Values of elements that render their text verbatim (never as Markdown or HTML)."""
    return [e.value for e in at.text] + [e.value for e in at.code]


def markdown_everywhere(at: AppTest) -> list[str]:
    """Values of elements whose text Streamlit renders as Markdown."""
    kinds = ("markdown", "caption", "title", "header", "subheader", "info", "success", "warning",
             "error", "latex")
    return [str(e.value) for kind in kinds for e in at.get(kind)]


def test_first_load_invites_to_generate(at):
    at.run()
    assert not at.exception
    assert any("Press **Generate**" in i.value for i in at.info)
    assert not at.error
    assert not at.main.code and not cards(at) and not charts(at)
    assert not at.button(key="generate").disabled
    assert any("tiny" in c.value for c in at.caption)  # the loaded model's label line


def test_the_first_screen_says_what_this_is_with_the_prompt_beside_generate(at):
    """One sentence of what this is, the prompt Generate will use as plain text, the explainer
    folded below Generate (issue 27: Generate on a stranger's first screen)."""
    at.run()
    assert any(m.value == INTRO for m in at.markdown)
    assert "Prompt: What is a KV cache, in two sentences?" in [t.value for t in at.text]
    explainer = [e for e in at.expander if e.label == "What am I looking at?"]
    assert len(explainer) == 1 and not explainer[0].proto.expanded


def test_after_a_run_the_figures_are_one_line_and_their_cards_follow_the_map(at):
    generate(at)
    line = next(re.sub(r"\\(.)", r"\1", c.value) for c in at.caption if "wall clock" in c.value)  # as read
    assert line.startswith("Tokens **8 × 1** · ") and "KV cache (measured) **" in line
    assert metrics(at)["Tokens"] == "8 × 1"  # the cards, with their explanations, below the map
    labels = [e.label for e in at.expander]  # the run's prompt, folded below its panels; then the guide
    assert labels[-2:][0].startswith("Prompt:") and labels[-1] == "What am I looking at?", labels


def test_generate_shows_text_figures_and_charts(at):
    generate(at)
    assert not at.error
    assert not any("Press **Generate**" in i.value for i in at.info)
    cached, recompute = [c.value for c in at.main.code]
    # The recompute run is behind, by how far depends on the machine's load: after its prefill
    # it may hold one token that decodes to nothing yet (a partial UTF-8 byte), shown as " ".
    assert cached.strip()
    assert cached.startswith(recompute.strip())  # the same tokens, the recompute run behind
    figures = metrics(at)
    assert list(figures)[:8] == ["Tokens", "KV cache (measured)", "Formula (computed)", "Time to first token",
                                 "Decode step (median)", "Tokens/s (compute)", "Tokens/s (wall clock)",
                                 "No cache ÷ cache: whole run"]  # the last step's ratio is in its help
    run = next(m for m in at.metric if m.label.endswith("whole run"))
    assert "No cache ÷ cache: last step: " in run.help
    assert run.delta in ("measured", "modelled")  # said under the figure
    assert float(figures["Tokens/s (wall clock)"]) > 0  # measured by the page during the run
    assert figures["Tokens"] == "8 × 1"
    assert figures["KV cache (measured)"] == figures["Formula (computed)"]
    assert any(s.value.startswith("Same tokens") for s in at.success)
    assert len(charts(at)) >= 6  # layers, total, grid, reservation, steps, layer times (+ race)
    captions = " ".join(c.value for c in at.caption)
    assert "Each new token adds" in captions and "blocks of 16 slots" in captions
    assert "Both runs take turns" in captions
    assert len(at.get("download_button")) >= 2  # the trace, and its tables / report
    assert any(b.key == "dl-trace" for b in at.get("download_button"))
    # The prompt as the model read it, with the chat template, in an inert text element.
    assert any("What is a KV cache, in two sentences?" in t.value for t in at.text)


def test_results_stay_after_a_rerun_and_token_marks_toggle(at):
    generate(at)
    plain = at.main.code[0].value
    before = metrics(at)
    at.toggle(key="show_tokens").set_value(True).run()
    assert not at.exception
    marked = at.main.code[0].value
    assert TOKEN_MARK in marked and TOKEN_MARK not in plain
    assert marked.replace(TOKEN_MARK, "") == plain
    assert metrics(at) == before  # the same run, redrawn from its trace
    assert len(charts(at)) >= 6
    at.toggle(key="show_tokens").set_value(False).run()
    assert at.main.code[0].value == plain


def test_stop_after_a_finished_run_keeps_it_and_claims_nothing(at):
    generate(at)
    text = at.main.code[0].value
    at.button(key="stop").click().run()
    assert not at.exception
    assert not any(i.value.startswith("Stopped") for i in at.info)  # nothing was running
    assert at.main.code[0].value == text


def test_stop_of_an_interrupted_run_says_so_and_keeps_it(at):
    generate(at)
    text = at.main.code[0].value
    at.session_state["run_done"] = False  # as a Stop click leaves a run cut short mid-loop
    at.button(key="stop").click().run()
    assert any(i.value.startswith("Stopped") for i in at.info)
    assert at.main.code[0].value == text


def test_batch_size_flows_into_the_figures(at):
    at.slider(key="batch").set_value(2)
    at.select_slider(key="block").set_value(4)
    generate(at)
    figures = metrics(at)
    assert figures["Tokens"].endswith("× 2")
    assert figures["KV cache (measured)"] == figures["Formula (computed)"]
    captions = " ".join(c.value for c in at.caption)
    assert "× batch 2" in captions and "blocks of 4 slots" in captions
    assert any("× batch 2" in e.label for e in at.expander)


def test_static_cache_makes_the_reservation_real(at):
    at.radio(key="backend").set_value("static")
    generate(at)
    blocks = [c.value for c in at.caption if "blocks of" in c.value]
    assert blocks and "real: StaticCache allocated it" in blocks[0]


def test_race_off_has_no_recompute_panel(at):
    at.toggle(key="race").set_value(False)
    generate(at)
    assert len(at.main.code) == 1
    assert not at.success
    assert not any("Both runs take turns" in c.value for c in at.caption)
    assert len(charts(at)) >= 6
    assert metrics(at)["KV cache (measured)"] == metrics(at)["Formula (computed)"]


@pytest.mark.parametrize("name", ["/nonexistent/kvviz-model", "kvviz-test/no-such-model"])
def test_unknown_model_is_an_error_naming_it(at, name):
    at.text_input(key="model").set_value(name).run()
    assert not at.exception and not at.error  # another model: nothing loads until asked
    assert at.button(key="generate").disabled
    at.button(key="load_model").click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and inert(name) in errors[0]  # named, Markdown escaped
    assert at.button(key="generate").disabled


def test_empty_prompt_is_refused(at):
    at.text_area(key=PROMPT).set_value("   \n ")
    generate(at)
    assert any("prompt is empty" in e.value for e in at.error)
    assert not at.main.code and not cards(at)


def test_prompt_longer_than_the_context_is_refused(at):
    at.text_area(key=PROMPT).set_value("cache " * 300)
    generate(at)
    errors = [e.value for e in at.error]
    assert errors and "exceeds this model's context of 256 tokens" in errors[0]
    assert not at.main.code and not cards(at)


PAYLOAD = ('<script>alert("kvviz")</script> <img src=x onerror=alert(1)> **bold** '
           '[link](javascript:alert(1)) <b>tag</b>')


@pytest.mark.parametrize("chat", [True, False])
def test_markup_in_the_prompt_is_shown_inert(at, chat):
    at.selectbox(key="preset").set_value("Free text").run()
    at.text_area(key="prompt-Free text").set_value(PAYLOAD)
    at.toggle(key="chat").set_value(chat)
    generate(at)
    assert not at.error
    assert any(PAYLOAD in t for t in texts_everywhere(at))
    for text in markdown_everywhere(at):
        for fragment in ("<script", "onerror", "**bold**", "javascript:", "<b>"):
            assert fragment not in text
    # st.html only ever carries kvviz's own fixed stylesheets and scripts, never text from the page
    fixed = [keys.help_overlay("Live"), PAGE_CSS, PRESENTER_CSS, RELOAD_SCRIPT, KEEP_HEIGHT_CSS, RUN_CARD_CSS,
             PRELOAD_CSS, DIM_HOLDER_CSS, RACE_NOTES_CSS, keys.PACE_HIDDEN_CSS]
    for body in (h.proto.body for h in at.get("html")):
        for piece in fixed:
            body = body.replace(piece, "")
        assert not body.strip(), body[:300]


def test_a_shared_link_restores_settings_and_never_generates(monkeypatch, tiny_dir):
    monkeypatch.setenv("KVVIZ_MODEL", str(tiny_dir))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update({"max_new": "8", "batch": "2", "block": "4", "preset": "Long document",
                            "race": "false"})
    at.run()
    assert not at.exception and not at.error
    assert at.slider(key="max_new").value == 8 and at.slider(key="batch").value == 2
    assert at.select_slider(key="block").value == 4 and at.selectbox(key="preset").value == "Long document"
    assert not at.toggle(key="race").value
    assert not at.main.code and not cards(at)  # nothing ran
    assert any("Press **Generate**" in i.value for i in at.info)


def test_run_notes_say_what_the_figures_lack():
    from types import SimpleNamespace

    from kvviz.core.meta import RunMeta
    from kvviz.live.view_panel import run_notes
    meta = RunMeta(attn_fallback="sdpa → eager: refused", attn_implementation="eager", state_modelled=False)
    notes = run_notes(meta, SimpleNamespace(cache_note="kvviz cannot read cache layers of class X"))
    assert notes[0].startswith("kvviz cannot read") and "eager" in notes[1] and "formula leaves" in notes[2]
    assert run_notes(RunMeta(state_modelled=True), SimpleNamespace(cache_note="")) == []


def test_settings_changed_after_a_run_mark_the_result_outdated(at):
    generate(at)
    assert not any("Outdated" in w.value for w in at.warning)
    at.slider(key="max_new").set_value(6).run()
    assert any("Outdated: new tokens changed" in w.value for w in at.warning)
    assert at.main.code  # the old result stays, marked
    generate(at)
    assert not any("Outdated" in w.value for w in at.warning)


def test_a_second_run_draws_over_the_first_without_losing_a_panel(at):
    generate(at)
    first = (len(charts(at)), len(at.main.code), len(at.metric))
    generate(at)
    assert (len(charts(at)), len(at.main.code), len(at.metric)) == first
    assert not [e for e in at.main.get("html") if "previous run" in str(e.proto)]  # undimmed once drawn


def test_the_layout_probe_runs_while_this_session_holds_the_device(at, monkeypatch):
    """run_meta's probe forwards use the shared model: outside the device turn they would run
    inside another visitor's timed steps (negative layer times, an unsaveable trace)."""
    from kvviz.app import ui
    from kvviz.engine import loop as engine
    seen, real = [], engine.run_meta

    def watched(lm, cfg):
        seen.append(ui.device_queue().held)
        return real(lm, cfg)
    monkeypatch.setattr(engine, "run_meta", watched)
    generate(at)
    assert seen == [True]
    assert not ui.device_queue().held  # given back after the run


def test_a_hosts_time_limit_ends_slow_motion_drawing_too(monkeypatch):
    """Slow motion draws after the tokens are made, while the session holds the device: the
    host's limit must end the drawing, not only the generation (else others wait on a replay)."""
    from types import SimpleNamespace

    from kvviz.live import run_panel
    from kvviz.live import settings_panel

    delays, clock = [], {"t": 0.0}
    monkeypatch.setattr(settings_panel, "pace_delay", lambda step_ms, pace: (delays.append(step_ms),
                                                                 clock.__setitem__("t", clock["t"] + 1.0)))
    events = [SimpleNamespace(mode="cached", step_ms=1.0, phase="decode") for _ in range(50)]
    pump = SimpleNamespace(done=lambda: False, take=lambda timeout: [events.pop() for _ in range(len(events))],
                           running=None, finished=SimpleNamespace(wait=lambda s: False))
    view = SimpleNamespace(update=lambda trace, final=False: None, show_wait=lambda *a: None, work=None,
                           timed_pace=None)
    trace = SimpleNamespace(events=[], append=lambda e: trace.events.append(e))
    run_panel.drive(pump, trace, view, 30.0, None, out_of_time=lambda: clock["t"] >= 3)
    assert len(delays) == 3  # three slow steps fit the limit; the rest are kept, not drawn slowly
    assert len(trace.events) == 50


def test_the_cached_prefill_wait_line_gives_its_time_left_as_an_estimate():
    """"Prefilling 1,984 prompt tokens: 22 s so far." stood alone while the no-cache prefill after
    it got a time left: given a pace, both say what is left, as an estimate."""
    import time

    from kvviz.engine.pump import Running
    from kvviz.live.view_panel import wait_line
    running = Running("cached", 0, time.monotonic() - 22.2)
    line = wait_line("cached", running, 1984, 1, 40.0)
    assert line == "Prefilling 1,984 prompt tokens: 22 s so far, ≈ 18 s left (an estimate from this device's pace)."
    assert "longer than the estimate" in wait_line("cached", running, 1984, 1, 20.0)


def test_a_first_run_on_a_long_prompt_knows_the_device_pace_before_its_prefill(at, monkeypatch):
    """No run before in this session: the pace the cached prefill's time left needs comes from a
    timed pass over the prompt's start, on the worker before the prefill (there was none)."""
    from kvviz.live import run_panel
    seen, real = [], run_panel.drive

    def drive(pump, trace, view, pace, known, *args, **kwargs):
        seen.append(view)
        return real(pump, trace, view, pace, known, *args, **kwargs)
    monkeypatch.setattr(run_panel, "drive", drive)
    at.text_area(key=PROMPT).set_value("The key value cache keeps the keys. " * 22)  # 224 tokens
    generate(at)
    (view,) = seen
    assert view.timed_pace is not None and view.timed_pace > 0


def test_on_stage_the_whole_run_is_a_card_and_the_last_step_and_formula_go_into_helps():
    """Presenter mode's headline: the whole run's no-cache ratio is a card (twice as wide: its
    "modelled" fits beside it); the last step's ratio and, on stage, the computed formula are in
    the helps of the whole run's and the measured cache's cards."""
    from kvviz.live import captions
    from kvviz.live.view_panel import card_figures
    figures = [(label, f"v{i}", f"h{i}") for i, (label, _, _) in enumerate(captions.widest_headline())]
    figures[1] = ("KV cache (measured)", "v1", "h1")
    screen, stage = card_figures(figures), card_figures(figures, stage=True)
    assert [label for label, _, _ in screen] == [label for label, _, _ in figures if label != captions.LAST_STEP_LABEL]
    assert [label for label, _, _ in stage] == [label for label, _, _ in screen if label != captions.FORMULA_LABEL]
    run = dict((label, h) for label, _, h in stage)[captions.RUN_LABEL]
    assert run == f"h8 {captions.LAST_STEP_LABEL}: v7. h7" and screen[-1] == (captions.RUN_LABEL, "v8", run)
    assert dict((label, h) for label, _, h in stage)["KV cache (measured)"] == f"h1 {captions.FORMULA_LABEL}: v2. h2"


def test_a_pass_modelled_to_be_long_gets_its_line_from_its_start():
    """The cached prefill of a long prompt, 0.1 s in: with the device's pace known (a timed pass)
    its progress line and estimate show at once; without one, only after WAIT_SHOWN_S."""
    import time
    from types import SimpleNamespace

    from kvviz.engine.pump import Running
    from kvviz.live import view_panel

    drawn = []
    slot = SimpleNamespace(caption=lambda text: drawn.append(("caption", text)),
                           progress=lambda fraction, text: drawn.append(("progress", text)),
                           empty=lambda: drawn.append(("empty", "")))
    work = SimpleNamespace(prefill_flops=lambda positions, batch: 1e12 * positions / 2000)
    view = SimpleNamespace(note_slot=slot, race_wait_slot=None, waiting={}, work=work,
                           meta=SimpleNamespace(prompt_tokens=2000, batch=1))
    running = Running("cached", 0, time.monotonic() - 0.1)
    view_panel.LiveView.show_wait(view, running, None, None)
    assert drawn == []  # no pace: the line waits for WAIT_SHOWN_S
    view_panel.LiveView.show_wait(view, running, None, 20e-12)  # 1e12 flops at 20 ps each: 20 s
    (kind, text), = drawn
    assert kind == "progress" and text.startswith("Prefilling 2,000 prompt tokens: 0 s so far, ≈ 20 s left (an estimate")


def test_the_timed_pass_runs_on_the_worker_with_its_own_line():
    """The pass that times the device runs on the worker (the page keeps drawing: run in the
    script thread it left the page still for 2.6 s under load) and, past WAIT_SHOWN_S, says so."""
    import time
    from types import SimpleNamespace

    from kvviz.engine.pump import Running
    from kvviz.live import run_panel, view_panel
    from tiny import tiny_lm

    from kvviz.core.config import RunConfig
    from kvviz.engine import cost, loop
    lm = tiny_lm()
    cfg = RunConfig(prompts=("The key value cache keeps the keys. " * 22,), max_new_tokens=2)
    view = SimpleNamespace(work=cost.model_work(lm), meta=loop.run_meta(lm, cfg), timed_pace=None)
    steps = run_panel.timed_pass(lm, cfg, view)
    assert view.timed_pace is None and list(steps) == [] and view.timed_pace > 0  # runs when iterated

    drawn = []
    slot = SimpleNamespace(caption=drawn.append, empty=lambda: drawn.append(""))
    shown = SimpleNamespace(note_slot=slot, race_wait_slot=None, waiting={}, meta=view.meta)
    shown.show_timing = lambda running, s: view_panel.LiveView.show_timing(shown, running, s)
    view_panel.LiveView.show_wait(shown, Running(view_panel.TIMING, 0, time.monotonic() - 1.5), None, None)
    assert drawn == ["Timing a 32-token pass, for the prefill's time left: 2 s so far."]



def test_a_fast_engine_is_drawn_at_the_pages_rates_not_at_its_own(monkeypatch):
    """A model making a token every 5 ms (a GPU's pace), drawn as `drive` draws it: ten frames a
    second of ten tokens each, for two seconds. The text goes out with every frame; the figures at
    most every FIGURES_S and the charts every CHART_INTERVAL_S, and a figure that reads the same is
    not sent again. Before, every frame also sent all eight cards and every chart every 0.15 s
    (160 cards and 66 charts here): on a fast engine the drawing thread held the interpreter the
    model's worker needed, and the page ran at 0.36-0.64 of headless (issue 39)."""
    import collections

    import streamlit.delta_generator as delta_generator
    from tiny import tiny_lm

    from kvviz.core.config import RunConfig
    from kvviz.core.trace import Trace
    from kvviz.engine import loop as engine
    from kvviz.live import cadence, run_panel, view_panel
    lm, cfg = tiny_lm(), RunConfig(max_new_tokens=200, stop_on_eos=False)
    meta, events = engine.run_meta(lm, cfg), list(engine.generate(lm, cfg))
    sent, real = collections.Counter(), delta_generator.DeltaGenerator._enqueue

    def counted(dg, delta_type, *args, **kwargs):
        sent[delta_type] += 1
        return real(dg, delta_type, *args, **kwargs)
    monkeypatch.setattr(delta_generator.DeltaGenerator, "_enqueue", counted)
    view = view_panel.LiveView(meta, cfg.max_new_tokens, race_on=False, show_tokens=False)  # bare mode: no page
    clock = {"t": 1000.0}
    monkeypatch.setattr(view_panel.time, "monotonic", lambda: clock["t"])  # drawing takes no time here
    sent.clear()
    trace = Trace(meta, [])
    for first in range(0, 200, 10):
        for event in events[first:first + 10]:
            trace.append(event)
        view.update(trace)
        clock["t"] += run_panel.FRAME_S
    assert sent["code"] == 20  # the text streams with every frame
    assert sent["metric"] <= 8 * (2.0 / cadence.FIGURES_S + 1), sent
    assert 3 * 6 <= sent["vega_lite_chart"] <= 7 * (2.0 / cadence.CHART_INTERVAL_S + 1), sent  # moving, at 2 Hz

def test_a_finished_run_ends_without_a_full_garbage_collection(at, monkeypatch):
    """After every run the page collected all garbage (loop.free_device_memory) before its final
    frame: 0.6-0.9 s on the loaded 2-core machine with the fast model's server (530,000 objects),
    holding the interpreter, so the run's last tokens reached the screen up to a second after the
    rest (issue 39). Only a failed run needs it (tests/live/test_reliability.py)."""
    from kvviz.engine import loop
    freed = []
    monkeypatch.setattr(loop, "free_device_memory", freed.append)
    generate(at)
    assert not at.exception and at.session_state["trace"].events_of("cached") and freed == []


def test_the_rest_after_the_last_tokens_ends_when_the_worker_does(monkeypatch):
    """`drive` rests between frames (at most one every FRAME_S); after the run's last tokens it
    rested out the frame's time, up to 0.1 s, before the final frame showed them: the rest now ends
    when the worker does."""
    from types import SimpleNamespace

    from kvviz.engine.pump import Pump
    from kvviz.live import run_panel
    slept = []
    monkeypatch.setattr(run_panel.time, "sleep", slept.append)
    events = [SimpleNamespace(mode="cached", phase="decode", step_ms=1.0) for _ in range(3)]
    pump, trace = Pump(), SimpleNamespace(events=[], append=lambda e: trace.events.append(e))
    view = SimpleNamespace(update=lambda trace: None, show_wait=lambda *a: None, work=None, timed_pace=None)
    pump.start(iter(events))
    run_panel.drive(pump, trace, view, 1.0, None)
    assert trace.events == events and pump.done() and slept == []
