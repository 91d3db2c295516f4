"""The guided tour's box on the Live page: the current step of kvviz.live.tour, with Back and Next
step buttons beside it. The box is as tall as its longest step at the screen's width: hidden copies
of every step (as the shipped example run reads them, and the start text) share the shown step's
grid cell, so the page never jumps as steps change and no step is cut, on a projector or a phone.

Next and Back have keyboard shortcuts (PageDown / PageUp: what a presentation clicker sends), so
in presenter mode the tour is the speaker's script. They live in a fragment, so that a press
redraws only the box: pressed while a run goes on, it never stops the run (Streamlit holds a
fragment's rerun until the script is done) and takes effect when the run ends; until then the
tour follows the run by itself (kvviz.live.tour.auto_index).

Imports no streamlit: the page hands `st` (drawing into the container it opened for the tour),
its session state and `st.fragment`. The texts are kvviz's own sentences with the run's numbers,
drawn Markdown-inert.
"""
from __future__ import annotations

import time
from dataclasses import replace

from kvviz.app import keys
from kvviz.app.slots import Slot
from kvviz.app import ui
from kvviz.app.ui import inert
from kvviz.core.trace import Trace
from kvviz.live import tour

STACK_CSS = """<style>
.st-key-tour-stack { display: grid; }
.st-key-tour-stack > * { grid-area: 1 / 1; }
[class*="st-key-tour-ghost"], [class*="st-key-tour-ghost"] * { visibility: hidden !important; }
</style>"""  # the shown step and its hidden copies in one grid cell: the cell is as tall as the tallest
NEXT_KEY, BACK_KEY = keys.TOUR_NEXT, keys.TOUR_BACK  # a presentation clicker's forward and back keys
# session state: the trace the tour follows, the step shown, since when, a pending press, and
# whether a presenter took over (Next / Back) from the automatic pace
FOR, SHOWN, SINCE, MOVE, MANUAL = "tour_for", "tour_shown", "tour_since", "tour_move", "tour_manual"
TOGGLE_HELP = ("Five short steps that point at what the run is doing as it happens, with its own "
               "numbers. Next / Back (PageDown / PageUp, a presentation clicker's keys) walk them.")
START_TITLE = "What is a KV cache? Watch one being built."
EXAMPLE = "smollm2-135m-cpu-fp32"  # the shipped example trace (assets/traces): a whole run's numbers
SLACK = " 0000000"  # a hidden copy's room for another run's longer numbers (a few more digits)
START_TEXT = ("Press Generate and this tour points at what happens, step by step: how the model "
              "reads the prompt, how its KV cache grows with every token, and what running without "
              "it would cost.")


class TourPanel:
    """Place it once per script run (`placed`); `draw(trace, final, race_on)` on every redraw."""

    def __init__(self, st, state):
        self.st, self.state = st, state
        self.slots: dict[str, Slot] = {}

    @classmethod
    def placed(cls, st, state, fragment) -> "TourPanel":
        """The tour's box and buttons, drawn where `st` draws now, as a fragment."""
        panel = cls(st, state)
        fragment(panel.draw_box)()
        return panel

    def draw_box(self) -> None:
        """The fragment's body: the box, the buttons and the step for the run kept in state."""
        text_col, button_col = self.st.container(key="tour-panel").columns([5, 1], vertical_alignment="center")
        box = text_col.container(border=True, key="tour-box")
        box.html(STACK_CSS)  # a fixed stylesheet, never user text
        stack = box.container(key="tour-stack")
        shown = stack.container(key="tour-step")
        title_col, link_col = shown.columns([3, 2], vertical_alignment="center")
        self.slots = {"title": Slot(title_col), "link": Slot(link_col), "text": Slot(shown)}
        for i, step in enumerate(longest_steps()):  # hidden: they only hold the box's height
            draw_step(stack.container(key=f"tour-ghost-{i}"), step)
        button_col.button("Next step", key="tour-next", shortcut=NEXT_KEY, on_click=self.press, args=(1,),
                          width="stretch")  # the button shows its key
        button_col.button("Back", key="tour-back", shortcut=BACK_KEY, on_click=self.press, args=(-1,),
                          width="stretch")
        self.slots["where"] = Slot(button_col)
        trace = self.state.get("trace")  # the last run, over (a run in progress draws itself)
        if isinstance(trace, Trace):
            self.draw(trace, final=True)
        else:
            self.show_start()

    def press(self, delta: int) -> None:
        """Next (+1) or Back (-1): applied by the next draw, which knows the steps."""
        self.state[MOVE] = self.state.get(MOVE, 0) + delta

    def draw(self, trace: Trace, final: bool = False, race_on: bool | None = None) -> None:
        """The step for the run so far; `final`: the run is over; `race_on` None: as the trace shows."""
        if not self.slots:
            return
        if self.state.get(FOR) is not trace:  # a new run: the tour starts again, at its own pace
            self.state.update({FOR: trace, SHOWN: None, MOVE: 0, MANUAL: False})
        race = "recompute" in trace.modes if race_on is None else race_on
        steps = tour.steps(trace.meta, trace.events_of("cached"),
                           trace.events_of("recompute") if race else None, ended=final)
        self.show(steps, self.index(steps, final))

    def index(self, steps: list[tour.TourStep], final: bool) -> int:
        shown, now = self.state.get(SHOWN), time.monotonic()
        move = self.state.get(MOVE, 0)
        if move:
            self.state.update({MOVE: 0, MANUAL: True})
            index = tour.moved(steps, shown or 0, 1 if move > 0 else -1)
        elif self.state.get(MANUAL):
            index = shown or 0
        else:
            index = tour.auto_index(steps, shown, now - self.state.get(SINCE, now), final)
        if index != shown:
            self.state.update({SHOWN: index, SINCE: now})
        return index

    def show(self, steps: list[tour.TourStep], index: int) -> None:
        step = steps[index]
        follow = "" if self.state.get(MANUAL) else " · follows the run"
        self.slots["where"].caption(f"Guided tour: step {index + 1} of {len(steps)}{follow}")
        self.slots["title"].markdown(f"**{inert(step.title)}**")
        self.slots["text"].markdown(inert(step.text))
        if step.link_url and step.ready:
            self.slots["link"].link_button(step.link_label or step.link_url, step.link_url, width="stretch")
        else:
            self.slots["link"].empty()

    def show_start(self) -> None:
        self.slots["where"].caption("Guided tour: starts with the run")
        self.slots["title"].markdown(f"**{START_TITLE}**")
        self.slots["text"].markdown(inert(START_TEXT))
        self.slots["link"].empty()


def draw_step(container, step: tour.TourStep) -> None:
    """A step as the box shows it: its title and link in a row, its text below (kvviz's own words)."""
    title_col, link_col = container.columns([3, 2], vertical_alignment="center")
    title_col.markdown(f"**{inert(step.title)}**")
    if step.link_url:
        link_col.link_button(step.link_label or step.link_url, step.link_url, width="stretch")
    container.markdown(inert(step.text))


def longest_steps() -> list[tour.TourStep]:
    """What the box must hold: the start text and every step of a whole run with its numbers (the
    shipped example trace, ended), each a little longer for another run's longer numbers."""
    example = ui.example_traces().get(EXAMPLE)
    start = tour.TourStep(START_TITLE, START_TEXT)
    if example is None:
        return [start]
    trace = ui.cached_example(str(example))
    steps = tour.steps(trace.meta, trace.events_of("cached"), trace.events_of("recompute") or None, ended=True)
    return [start, *(replace(step, text=step.text + SLACK) for step in steps)]
