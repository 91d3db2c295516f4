"""The guided tour's box (kvviz.live.tour_panel): what the box must hold, how Next and Back move
it against the run's own pace (its state alone), and the box on the Live page (AppTest)."""
from __future__ import annotations

import re

import pytest

from kvviz.live import tour, tour_panel
from tests.live.test_tour import PAGES, run


def test_the_box_holds_the_start_and_every_step_of_the_shipped_example_with_room_to_spare():
    start, *steps = tour_panel.longest_steps()
    assert (start.title, start.text) == (tour_panel.START_TITLE, tour_panel.START_TEXT)
    assert len(steps) == 5 and all(s.text.endswith(tour_panel.SLACK) for s in steps)


def test_next_moves_one_step_per_draw_and_then_the_tour_stops_following_the_run():
    steps, _, _ = run(8, 3)  # steps 1-3 ready, the run goes on
    state: dict = {}
    panel = tour_panel.TourPanel(st=None, state=state)
    assert panel.index(steps, final=False) == 0 and state[tour_panel.SHOWN] == 0
    panel.press(1)
    panel.press(1)  # two presses before a draw: one step, as tour.moved takes one
    assert panel.index(steps, final=False) == 1 and state[tour_panel.MANUAL]
    state[tour_panel.SINCE] -= 10 * tour.MIN_READ_S  # read for long: a manual tour stays put
    assert panel.index(steps, final=False) == 1
    panel.press(-1)
    assert panel.index(steps, final=False) == 0 and state[tour_panel.MOVE] == 0


@pytest.mark.slow
def test_the_live_page_draws_the_tour_and_next_walks_it(tiny_dir, monkeypatch):
    """The Live page with ?tour=true on the tiny model (AppTest): after a run the box shows a step
    with the run's own prompt length, Next step moves on, Back comes back; off, no box."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("KVVIZ_MODEL", str(tiny_dir))
    for name in ("KVVIZ_PRESENT", "KVVIZ_HOSTED", "KVVIZ_HOSTED_MODELS"):
        monkeypatch.delenv(name, raising=False)
    at = AppTest.from_file(str(PAGES.parent / "app.py"), default_timeout=120)
    at.run()
    assert not at.toggle(key="tour").value  # off for engineers
    assert not [b for b in at.button if b.key == "tour-next"]
    at.toggle(key="tour").set_value(True).run()
    at.slider(key="max_new").set_value(8).run()
    at.button(key="generate").click().run()
    assert not at.exception, at.exception
    trace = at.session_state["trace"]

    def shown() -> str:
        """The tour's line, its step's title and its text, as read (Markdown escapes off)."""
        where = next(str(c.value) for c in at.caption if str(c.value).startswith("Guided tour"))
        texts = [str(m.value) for m in at.markdown]
        title = next(i for i, v in enumerate(texts) if re.match(r"\*\*\d · ", v))
        return re.sub(r"\\(.)", r"\1", " | ".join([where, texts[title], texts[title + 1]]))

    assert "step 1 of 5" in shown() and f"{trace.meta.prompt_tokens:,} tokens" in shown()
    at.button(key="tour-next").click().run()
    assert "step 2 of 5" in shown() and "2 · One new column" in shown()
    at.button(key="tour-back").click().run()
    assert "step 1 of 5" in shown() and "follows the run" not in shown()
