"""The Live page's view (kvviz.live.view_panel): run notes, the figure cards on screen and on
stage, the wait lines of a long pass, and how often a fast run's frames redraw what (no page:
the view in bare mode, or its methods on stand-ins)."""
from __future__ import annotations

from kvviz.live import view_panel


def test_run_notes_say_what_the_figures_lack():
    from types import SimpleNamespace

    from kvviz.core.meta import RunMeta
    meta = RunMeta(attn_fallback="sdpa → eager: refused", attn_implementation="eager", state_modelled=False)
    notes = view_panel.run_notes(meta, SimpleNamespace(cache_note="kvviz cannot read cache layers of class X"))
    assert notes[0].startswith("kvviz cannot read") and "eager" in notes[1] and "formula leaves" in notes[2]
    assert view_panel.run_notes(RunMeta(state_modelled=True), SimpleNamespace(cache_note="")) == []


def test_the_cached_prefill_wait_line_gives_its_time_left_as_an_estimate():
    """"Prefilling 1,984 prompt tokens: 22 s so far." stood alone while the no-cache prefill after
    it got a time left: given a pace, both say what is left, as an estimate."""
    import time

    from kvviz.engine.pump import Running
    running = Running("cached", 0, time.monotonic() - 22.2)
    line = view_panel.wait_line("cached", running, 1984, 1, 40.0)
    assert line == "Prefilling 1,984 prompt tokens: 22 s so far, ≈ 18 s left (an estimate from this device's pace)."
    assert "longer than the estimate" in view_panel.wait_line("cached", running, 1984, 1, 20.0)


def test_on_stage_the_whole_run_is_a_card_and_the_last_step_and_formula_go_into_helps():
    """Presenter mode's headline: the whole run's no-cache ratio is a card (twice as wide: its
    "modelled" fits beside it); the last step's ratio and, on stage, the computed formula are in
    the helps of the whole run's and the measured cache's cards."""
    from kvviz.live import captions
    figures = [(label, f"v{i}", f"h{i}") for i, (label, _, _) in enumerate(captions.widest_headline())]
    figures[1] = ("KV cache (measured)", "v1", "h1")
    screen, stage = view_panel.card_figures(figures), view_panel.card_figures(figures, stage=True)
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
    from kvviz.live import cadence, run_panel
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
    frames = 2.0 / cadence.CHART_INTERVAL_S  # the charts' frames in the two seconds: moving, at 1 Hz
    assert frames * 6 <= sent["vega_lite_chart"] <= 7 * (frames + 1), sent
