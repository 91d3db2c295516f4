"""The Live page's run controller (kvviz.live.run_panel): `drive` draws a run's events under a
host's time limit and ends its rest with the worker; the timed pass runs on the worker (stand-in
views and pumps, the tiny model)."""
from __future__ import annotations

from kvviz.live import run_panel


def test_a_hosts_time_limit_ends_slow_motion_drawing_too(monkeypatch):
    """Slow motion draws after the tokens are made, while the session holds the device: the
    host's limit must end the drawing, not only the generation (else others wait on a replay)."""
    from types import SimpleNamespace

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


def test_the_timed_pass_runs_on_the_worker_with_its_own_line():
    """The pass that times the device runs on the worker (the page keeps drawing: run in the
    script thread it left the page still for 2.6 s under load) and, past WAIT_SHOWN_S, says so."""
    import time
    from types import SimpleNamespace

    from kvviz.engine.pump import Running
    from kvviz.live import view_panel
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


def test_the_rest_after_the_last_tokens_ends_when_the_worker_does(monkeypatch):
    """`drive` rests between frames (at most one every FRAME_S); after the run's last tokens it
    rested out the frame's time, up to 0.1 s, before the final frame showed them: the rest now ends
    when the worker does."""
    from types import SimpleNamespace

    from kvviz.engine.pump import Pump
    slept = []
    monkeypatch.setattr(run_panel.time, "sleep", slept.append)
    events = [SimpleNamespace(mode="cached", phase="decode", step_ms=1.0) for _ in range(3)]
    pump, trace = Pump(), SimpleNamespace(events=[], append=lambda e: trace.events.append(e))
    view = SimpleNamespace(update=lambda trace: None, show_wait=lambda *a: None, work=None, timed_pace=None)
    pump.start(iter(events))
    run_panel.drive(pump, trace, view, 1.0, None)
    assert trace.events == events and pump.done() and slept == []
