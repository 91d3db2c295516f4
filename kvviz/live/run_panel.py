"""The Live page's run controller: a generation started on the shared model in this session's
device turn, the cached run and the no-cache race taking turns on a worker (kvviz.engine.pump),
drawn into a kvviz.live.view_panel.LiveView as the events arrive; the device's pace fitted for
the long passes' time left. The trace lands in the session state, a stopped run's too.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import replace

import streamlit as st

from kvviz.app import ui
from kvviz.engine import loop
from kvviz.engine import race
from kvviz.live import settings_panel
from kvviz.live import view_panel
from kvviz.live import downloads_panel
from kvviz.engine import cost
from kvviz.engine.pump import Pump
from kvviz.app.failures import failure_message
from kvviz.core.errors import UserError
from kvviz.core.trace import Trace

TICK_S = 0.25  # the page redraws at least this often during a run (a long step's progress)
FRAME_S = 0.1  # and at most ten times a second: tokens arriving faster are drawn together


def run_live(lm, cfg, opts, status, tour=None) -> None:
    """Generate with the live panels updating; the trace lands in session state even if stopped."""
    rules = ui.policy()
    try:
        rules.check_run(lm.name, cfg)  # allowlist and caps, on the server, before joining the line
    except UserError as exc:
        status.error(f"Cannot generate: {ui.visitor_text(exc, 'run start')}")
        return
    with ui.device_turn(status):  # the layout probe runs forwards on the shared model too
        try:
            meta = loop.run_meta(lm, cfg)
            rules.check_prompt_tokens(meta.prompt_tokens)
        except (UserError, ValueError) as exc:
            status.error(f"Cannot generate: {ui.visitor_text(exc, 'run start')}")  # library text: hosted never
            return
        trace = Trace(meta, [])
        view = generate_in_turn(lm, cfg, opts, status, trace, rules, tour)
    st.session_state["run_done"] = True
    fitted = seconds_per_flop(trace.events, view.work)
    if fitted:
        st.session_state[f"seconds_per_flop:{lm.name}"] = fitted
    if trace.events:
        view.update(trace, final=True)
        st.session_state["wall_tokens_per_s"] = view.wall_tokens_per_s()
        downloads_panel.downloads(trace, view.wall_tokens_per_s())


def generate_in_turn(lm, cfg, opts, status, trace: Trace, rules, tour=None) -> view_panel.LiveView:
    """The run itself, while this session holds the device: the cached run and, in a race, the
    recompute run taking turns, drawn as they go. Returns the view it drew into."""
    previous = st.session_state.get("trace")
    st.session_state["trace"], st.session_state["run_done"] = trace, False
    st.session_state.pop("wall_tokens_per_s", None)  # set again when this run ends
    view = view_panel.prompt_and_view(loop.render_prompts(lm.tokenizer, cfg)[0], trace.meta, cfg.max_new_tokens,
                           opts.race, opts.show_tokens)
    st.session_state["run_arrivals"] = view.arrivals  # filled in place: a Stop keeps the rate so far
    if not view.show_previous(previous):
        view.clear()
    view.measure_wall, view.work = True, cost.model_work(lm)
    view.every_step = opts.pace > 1.0  # slow motion shows each step's text and figures
    view.tour = tour  # after show_previous: the tour follows this run only, from its prefill on
    if tour is not None:
        tour.draw(trace)
    deadline = time.monotonic() + rules.max_run_s if rules.enabled else float("inf")
    out_of_time = lambda: time.monotonic() > deadline  # noqa: E731
    pump, failed = Pump(), False
    cached = loop.generate(lm, cfg, "cached", should_stop=out_of_time)
    short = replace(cfg, max_new_tokens=rules.cap("recompute_tokens", cfg.max_new_tokens))
    recompute = loop.generate(lm, short, "recompute", should_stop=out_of_time) if opts.race else None
    try:
        known_pace = st.session_state.get(f"seconds_per_flop:{lm.name}")  # this session's last run's
        timing = () if known_pace else pump.tracked(timed_pass(lm, cfg, view), view_panel.TIMING)
        pump.start(itertools.chain(timing, race.interleave(
            pump.tracked(cached, "cached"), pump.tracked(recompute, "recompute") if recompute is not None else None)))
        drive(pump, trace, view, opts.pace, known_pace, out_of_time)
    except Exception as exc:  # e.g. out of memory: say so, keep what was produced
        failed = True  # not the exception: its traceback must be garbage for the collection below
        status.error(failure_message(exc, rules.enabled))
    finally:
        pump.stop()  # the worker ends after its step in progress: then the generators are free
        cached.close()
        if recompute is not None:
            recompute.close()
        if failed:  # its traceback held the run's tensors in cycles: collect them, give the memory back
            loop.free_device_memory(lm.device)  # not after every run: a full collection (0.6-0.9 s on the
            # loaded 2-core machine) holds the interpreter, and the run's last text waited behind it
        view.show_wait(None, trace, None)
    if out_of_time():
        status.warning(f"Stopped at this host's limit of {rules.max_run_s:.0f} s per run.")
    return view


def drive(pump: Pump, trace: Trace, view: view_panel.LiveView, pace: float, known_s_per_flop: float | None,
          out_of_time=lambda: False) -> None:
    """Draw the run from the worker's latest events at a fixed rate, and any long wait's progress.

    Ends when the worker is done or, on a host, at its time limit: slow motion draws after the
    tokens are made, and the drawing holds the device turn too, so the limit bounds it as well."""
    per_flop = known_s_per_flop
    while not pump.done() and not out_of_time():
        started = time.monotonic()
        arrived = pump.take(TICK_S)
        for event in arrived:
            trace.append(event)
            if pace > 1.0 and not out_of_time():  # slow motion: each step drawn on its own, stretched
                view.update(trace)
                if event.mode == "cached":
                    settings_panel.pace_delay(event.step_ms, pace)
        if arrived and pace <= 1.0:
            view.update(trace)
        if any(e.phase == "prefill" or e.mode == "recompute" for e in arrived):  # the passes it fits
            per_flop = seconds_per_flop(trace.events, view.work) or per_flop
        view.show_wait(pump.running, trace, per_flop or view.timed_pace)
        rest = FRAME_S - (time.monotonic() - started)
        if arrived and rest > 0:
            pump.finished.wait(rest)  # the frame's rest, cut short when the worker ends: its last tokens now


def timed_pass(lm, cfg, view: view_panel.LiveView):
    """On the worker, before the cached prefill when no earlier run of this session measured the
    device's pace: one timed pass over the prompt's start (cost.calibrated_seconds_per_flop; none
    for a short prompt), into `view.timed_pace`, for the prefill's modelled time left. Without it
    a long first prefill showed only "22 s so far" (the no-cache prefill after it had an
    estimate). A generator without events, so that it runs on the worker while the page draws."""
    view.timed_pace = cost.calibrated_seconds_per_flop(lm, cfg, view.work, view.meta.prompt_tokens)
    yield from ()


def seconds_per_flop(events, work) -> float | None:
    """The device's pace on whole-text passes (prefills, recompute steps): seconds per
    cost.ModelWork flop, least squares through zero, as the Sweep's time-left model fits it."""
    if work is None:
        return None
    full = [e for e in events if e.phase == "prefill" or e.mode == "recompute"]
    flops = [work.prefill_flops(e.positions // max(len(e.token_ids), 1), len(e.token_ids)) for e in full]
    denominator = sum(f * f for f in flops)
    return sum(e.step_ms / 1000 * f for e, f in zip(full, flops)) / denominator if denominator else None
