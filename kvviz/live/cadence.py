"""When each part of the Live page may draw again while a run goes on (`Cadence`). Pure.

The page draws from the latest events at a rate a screen and a viewer can use, never at the
model's: the text at most every TEXT_S, the figures every FIGURES_S, the charts every
CHART_INTERVAL_S, each part slower still when its drawing would take more than its share of the
wall clock. Drawing runs on the script thread while the model runs on a worker
(kvviz.engine.pump): both need the interpreter, so on a fast engine (a GPU, or a tiny model) every
millisecond spent drawing is one the model waits.
"""
from __future__ import annotations

import time
from contextlib import contextmanager


# What each part of the page may cost while a run goes on (Cadence): (at most every s, at most
# this share of the wall clock, at least every s). The text streams at up to 10 Hz, the figures
# at 4 Hz and the charts at 1 Hz: on a 3 ms-a-token engine, drawing every event held the model
# back by a third or more (docs/benchmarks.md, the fast model's rows). The charts are most of the
# drawing's cost (≈ 50 ms a frame on the default model, on 2 CPU cores, the model's waits for the
# interpreter included): at 2 Hz and 5 % of the wall clock the default model's page decoded at
# 0.93 of headless at the same thread count, at 1 Hz and 2.5 % at 0.975, with text and figures
# as they are (`python -m bench --only live-browser --reps 5`, 2026-12-07).
TEXT_S, TEXT_SHARE = 0.1, 0.03
FIGURES_S, FIGURES_SHARE = 0.25, 0.02
CHART_INTERVAL_S, REDRAW_SHARE, CHART_MAX_GAP_S = 1.0, 0.025, 2.0  # charts keep moving, however slow
# On a screen the headline figures stand twice: in a line above the texts (the figures' cadence)
# and as cards below the map. Each card is a message the browser renders the page's tree for (a
# frame of figures was nine of them), so the cards follow at the charts' pace; on stage the cards
# are the only place and go with the figures.
CARDS_S, CARDS_SHARE = 1.0, 0.01


class Cadence:
    """When each part of the page may draw again: no sooner than its shortest gap, and late
    enough that its drawing takes at most its share of the wall clock (a part that took c
    seconds waits c / share), but never later than its longest gap. Measured in wall-clock time:
    on a loaded machine a frame's time includes the moments its thread held the interpreter
    while waiting for a core, and the model's worker waits through those too."""

    def __init__(self, parts: dict[str, tuple[float, float, float]]):
        self.parts = parts  # name -> (shortest gap s, share of the wall clock, longest gap s)
        self.next_s = dict.fromkeys(parts, 0.0)  # when each may draw next (time.monotonic)
        self.spent_s = dict.fromkeys(parts, 0.0)  # wall seconds each has drawn, in all
        self.frames = dict.fromkeys(parts, 0)

    def due(self, part: str, now: float) -> bool:
        return now >= self.next_s[part]

    @contextmanager
    def drawing(self, part: str):
        """Time the drawing of `part` and set when it may draw next."""
        started = time.monotonic()
        try:
            yield
        finally:
            cost = time.monotonic() - started
            shortest, share, longest = self.parts[part]
            self.next_s[part] = started + min(max(shortest, cost / share), longest)
            self.spent_s[part] += cost
            self.frames[part] += 1


def page_cadence() -> Cadence:
    return Cadence({"text": (TEXT_S, TEXT_SHARE, TEXT_S * 5), "figures": (FIGURES_S, FIGURES_SHARE, FIGURES_S * 4),
                    "cards": (CARDS_S, CARDS_SHARE, CARDS_S * 2),
                    "charts": (CHART_INTERVAL_S, REDRAW_SHARE, CHART_MAX_GAP_S)})
