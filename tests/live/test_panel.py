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
    # 24 tokens: the no-cache run decodes once its prefill fits in the cached run's measured time
    # (kvviz.engine.race); 8 tiny-model steps (~25 ms) left no room for a hiccup on a loaded machine
    at.slider(key="max_new").set_value(24)
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
    assert figures["Tokens"] == "24 × 1"
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


