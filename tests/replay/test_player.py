"""Replay's player (kvviz.replay.player): which step shows when, and its controls' state. Pure: a
session state dict, a fake clock, a fake rerun."""
from kvviz.replay import player
from kvviz.replay.player import PLAYING, STEP, Player

STEP_MS = [400.0, 300.0, 300.0, 300.0, 300.0]  # the prefill, then four decode steps: steps 1-5 on the slider


class Clock:
    def __init__(self):
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_a_step_is_due_once_the_recorded_steps_since_the_start_have_passed():
    assert player.due_step(STEP_MS, 1, 0.0, 1.0) == 1
    assert player.due_step(STEP_MS, 1, 0.299, 1.0) == 1
    assert player.due_step(STEP_MS, 1, 0.300, 1.0) == 2  # step 2 shows the event that took 300 ms
    assert player.due_step(STEP_MS, 1, 0.650, 1.0) == 3
    assert player.due_step(STEP_MS, 1, 0.650, 0.5) == 2  # half speed: twice as long
    assert player.due_step(STEP_MS, 3, 99.0, 1.0) == 5  # never past the last step
    assert player.due_in_s(STEP_MS, 1, 3, 0.25) == 2.4


def test_play_draws_every_panel_at_the_step_on_the_slider_and_keeps_the_run_s_pace():
    """Each script run shows one step: the slider's. A page slower than the steps skips to the
    step due now (the pace holds); one faster waits for the next step."""
    state, clock, reruns, waits = {STEP: 5}, Clock(), [], []
    playback = Player(state, STEP_MS, 1.0, clock)
    playback.toggle()  # at the end: from the start
    assert state[STEP] == 1 and playback.playing
    shown = []
    for _ in range(10):
        if not playback.playing:
            break
        step = playback.advance()
        assert state[STEP] == step  # the slider is set to the step drawn, before it is drawn
        shown.append(step)
        clock.now += 0.3  # drawing a step takes 300 ms, then it is held HOLD_S: 500 ms a frame
        playback.next_step(step, lambda: reruns.append(1), lambda s: (waits.append(s), setattr(clock, "now", clock.now + s)))
    assert shown == [1, 2, 4, 5] and not playback.playing  # 500 ms a frame against 300 ms steps: step 3 skipped
    assert len(reruns) == 3 and state[STEP] == 5 and waits == [0.2] * 3


def test_a_fast_page_waits_for_each_step():
    state, clock, waits = {STEP: 2}, Clock(), []
    playback = Player(state, STEP_MS, 1.0, clock)
    playback.toggle()
    assert playback.advance() == 2
    clock.now += 0.01
    playback.next_step(2, lambda: None, waits.append)
    assert abs(waits[0] - 0.29) < 1e-9  # step 3 is due 300 ms after the start; 10 ms went on drawing
    clock.now += 1.0
    playback.next_step(3, lambda: None, waits.append)
    assert waits[1] == player.HOLD_S  # a step overdue still stays whole on screen HOLD_S


def test_instant_draws_every_step_once():
    state, reruns = {STEP: 5}, []
    playback = Player(state, STEP_MS, 0.0, Clock())
    playback.toggle()
    shown = []
    while playback.playing:
        shown.append(playback.advance())
        playback.next_step(shown[-1], lambda: reruns.append(1), lambda s: None)
    assert shown == [1, 2, 3, 4, 5]


def test_pause_step_and_a_drag_while_playing():
    state, clock = {STEP: 2}, Clock()
    playback = Player(state, STEP_MS, 1.0, clock)
    playback.toggle()
    playback.next_step(playback.advance(), lambda: None, lambda s: None)
    state[STEP] = 4  # the slider dragged while playing: play on from there
    clock.now += 5.0
    assert playback.advance() == 4 and playback.playing
    playback.toggle()  # Pause
    assert not playback.playing and state[STEP] == 4
    playback.step(1)
    playback.step(1)  # never past the end
    assert state[STEP] == 5
    playback.step(-1)
    assert state[STEP] == 4 and not state[PLAYING]
    playback.toggle()
    playback.step(-1)  # a step pauses
    assert not playback.playing and state[STEP] == 3


def test_a_playback_left_for_another_page_goes_on_from_where_it_was():
    """Leaving Replay mid-play leaves it playing in the session; back later, it does not jump to
    the step the old clock says is due."""
    state, clock = {STEP: 1}, Clock()
    playback = Player(state, STEP_MS, 1.0, clock)
    playback.toggle()
    playback.next_step(playback.advance(), lambda: None, lambda s: None)
    clock.now += 60.0  # another page, a minute
    assert playback.advance() == 1 and playback.playing
