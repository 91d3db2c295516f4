"""Replay's player: which recorded step shows when, and the Play / Pause / step controls.

A playback is a run of short script runs, one recorded step each: every run draws the whole page
(the Step slider, the figures, the texts, the map and every chart) at one step, then sleeps until
the next step is due and asks for another run. So the slider always reads the step every panel
shows, and a Pause or a drag of the slider takes effect at the next step. A step is due when the
recorded time of the steps since the playback started, divided by the speed, has passed; a page
slower to draw than the steps came skips to the step due now, so the playback keeps the run's
pace and every frame is one whole step. A drawn step stays whole on screen at least `HOLD_S`
(a script run redraws the page top to bottom: without a pause between two runs, a page slower
than the steps would always be half one step, half the next).

Imports no streamlit: the page hands its session state (and `st.rerun` to `next_step`).
"""
from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping, Sequence

STEP = "replay_step"  # the Step slider's key: the step shown, counted from 1 (1 = the prefill)
PLAYING = "replay_playing"
CLOCK = "replay_clock"  # (monotonic start, the step it started at, the speed): while playing
SHOWN = "replay_shown"  # the step the last script run drew (a different slider value: moved by hand)
SHOWN_AT = "replay_shown_at"  # when it drew it (monotonic seconds)
HOLD_S = 0.2  # the least time a drawn step stays on screen, whole, before the next is drawn
RESUME_S = 3.0  # a playback whose last step was drawn longer ago was left (another page): it resumes


def due_in_s(step_ms: Sequence[float], start: int, step: int, speed: float) -> float:
    """Seconds after a playback started at step `start` that step `step` is due: the recorded times
    of the steps in between (step j shows the cached event j - 1), divided by `speed`."""
    return sum(step_ms[start:step]) / 1000 / speed


def due_step(step_ms: Sequence[float], start: int, elapsed_s: float, speed: float) -> int:
    """The last step due `elapsed_s` after a playback started at step `start` (1-based; at most
    the last recorded step)."""
    step, spent_s = start, 0.0
    while step < len(step_ms) and spent_s + step_ms[step] / 1000 / speed <= elapsed_s:
        spent_s += step_ms[step] / 1000 / speed
        step += 1
    return step


class Player:
    """The Replay page's playback, kept in the session state between script runs.

    `speed` 0 is "instant": every step drawn once, each held `HOLD_S`.
    """

    def __init__(self, state: MutableMapping, step_ms: Sequence[float], speed: float,
                 clock: Callable[[], float] = time.monotonic):
        self.state, self.step_ms, self.speed, self.clock = state, list(step_ms), speed, clock

    @property
    def steps(self) -> int:
        return len(self.step_ms)

    @property
    def playing(self) -> bool:
        return bool(self.state.get(PLAYING))

    def current(self) -> int:
        return min(max(int(self.state.get(STEP, self.steps)), 1), self.steps)

    def toggle(self) -> None:
        """Play (from the slider's step; from the start when it stands at the end), or pause."""
        if self.playing:
            self.pause()
            return
        start = self.current() if self.current() < self.steps else 1
        self.state.update({STEP: start, PLAYING: True, CLOCK: (self.clock(), start, self.speed), SHOWN: None})

    def pause(self) -> None:
        """Stop at the slider's step, written back: the browser's slider may already show a later
        step than the one the Pause click sent (a playing run sent it after the click left), and a
        step written by the script is sent again, so slider and panels show the same step."""
        self.state.update({PLAYING: False, STEP: self.current()})
        self.state.pop(CLOCK, None)

    def step(self, delta: int) -> None:
        """One step back (-1) or forward (+1), paused."""
        self.pause()
        self.state[STEP] = min(max(self.current() + delta, 1), self.steps)

    def advance(self) -> int:
        """Before the slider is drawn: the step this script run shows (moved on when playing)."""
        if not self.playing:
            return self.current()
        now, here = self.clock(), self.current()
        started, start, speed = self.state.get(CLOCK) or (now, here, self.speed)
        left = now - self.state.get(SHOWN_AT, now) > RESUME_S  # back from another page: on from here
        if here != self.state.get(SHOWN) or speed != self.speed or left:  # moved by hand, or a new speed
            started, start, speed = now, here, self.speed
        self.state[CLOCK] = (started, start, speed)
        if self.speed == 0:  # instant: one step further each script run, from the start step
            shown = min(here + 1, self.steps) if here == self.state.get(SHOWN) else here
        else:
            shown = max(here, due_step(self.step_ms, start, now - started, self.speed))
        self.state[STEP] = shown
        if shown >= self.steps:  # the last step: drawn as paused (Play, the downloads)
            self.pause()
        return shown

    def next_step(self, shown: int, rerun: Callable[[], None], sleep: Callable[[float], None] = time.sleep) -> None:
        """After the page is drawn at `shown`: wait for the next step and `rerun`, or stop at the end."""
        self.state.update({SHOWN: shown, SHOWN_AT: self.clock()})
        if not self.playing:
            return
        wait_s = HOLD_S
        if self.speed > 0:
            started, start, _ = self.state[CLOCK]
            wait_s = max(wait_s, started + due_in_s(self.step_ms, start, shown + 1, self.speed) - self.clock())
        sleep(wait_s)
        rerun()
