"""The Live page's fixed stylesheets, aimed at Streamlit's own elements (their `data-testid`s and
the `.st-key-<key>` classes of keyed containers): room kept for lines that come and go, the
previous run dimmed and labelled, the presenter's fixed-height text boxes, the hidden chart
preload. No user text ever goes through them. The dimmed panels are the chart registry's
(kvviz.live.charts.PANELS): the cached run's, and the race's (RACE_PANELS).
"""
from __future__ import annotations

import kvviz.live.charts

RACE_NOTES_CSS = """<style>.st-key-race-notes { min-height: 9.5rem; }</style>"""
# Room for the parity line and the race's end note at two lines each (measured 109 + 21 + 64 px at
# 1920 x 1080 in presenter mode, 9.2 rem): the note appears at the end and the parity line wraps as
# its count grows ("so far"), and neither may push the panels below down.


RUN_CARD_CSS = """<style>
.st-key-headline-run [data-testid="stMetric"] > div, .st-key-headline-run-ghost [data-testid="stMetric"] > div {
  display: flex; flex-wrap: wrap; align-items: center; column-gap: 0.6rem; }
.st-key-headline-run [data-testid="stMetricLabel"], .st-key-headline-run-ghost [data-testid="stMetricLabel"] {
  flex-basis: 100%; }
</style>"""  # the whole run's card: "measured" / "modelled" beside its figure when there is room


PREVIOUS_LABEL = ('content: "previous run"; position: absolute; top: 0.35rem; right: 0.75rem; z-index: 1; '
                  'font-size: 0.75rem; font-weight: 600; color: #555; letter-spacing: 0.04em; '
                  'text-transform: uppercase;')  # absolute: the label takes no room, nothing moves


def dim_css(keys: tuple[str, ...]) -> str:
    """Dim the containers with these keys and label each "previous run" in its top-right corner."""
    boxes = ", ".join(f".st-key-{k}" for k in keys)
    labels = ", ".join(f".st-key-{k}::before" for k in keys)
    return (f"<style>{boxes} {{ opacity: 0.45; position: relative; }} {labels} {{ {PREVIOUS_LABEL} }} "
            ".st-key-headline-figures::before { top: -1.1rem; right: 0; }</style>")


KEEP_IN_PLACE = "<span hidden></span>"
# st.html sends style-only HTML to the page's event container, where emptying its placeholder
# does not remove it (the "previous run" labels stayed after the run's first tokens): an element
# beside the style keeps it in its placeholder, inside a hidden container (DIM_HOLDER_CSS).
DIM_CSS = {  # while a panel still shows the previous run
    "cached": dim_css(("cached-panel", "cache-map-panel", "headline-figures", "headline-line",
                       *(f"panel-{p}" for p in kvviz.live.charts.PANELS if p not in kvviz.live.charts.RACE_PANELS)))
    + KEEP_IN_PLACE,
    "recompute": dim_css(("recompute-panel", *(f"panel-{p}" for p in kvviz.live.charts.PANELS
                                               if p in kvviz.live.charts.RACE_PANELS))) + KEEP_IN_PLACE,
}
DIM_HOLDER_CSS = "<style>.st-key-dim-styles, div:has(> .st-key-dim-styles) { display: none; }</style>"


PRELOAD_CSS = "<style>.st-key-chart-preload { display: none; }</style>"


PRESENTER_TEXT_CSS = """<style>
.st-key-cached-panel-text, .st-key-recompute-panel-text { height: 16vh !important; min-height: 16vh; }
</style>"""  # scaled to the screen: 115 px at 720 high, 173 px at 1080


KEEP_HEIGHT_CSS = """<style>
.st-key-cached-panel-stack, .st-key-recompute-panel-stack, .st-key-race-caption-stack,
.st-key-headline-figures-stack, .st-key-headline-line-stack { display: grid; }
.st-key-cached-panel-stack > *, .st-key-recompute-panel-stack > *, .st-key-race-caption-stack > *,
.st-key-headline-figures-stack > *, .st-key-headline-line-stack > * { grid-area: 1 / 1; }
.st-key-cached-panel-ghost, .st-key-recompute-panel-ghost, .st-key-race-caption-ghost,
.st-key-race-caption-ghost *, .st-key-headline-figures-ghost, .st-key-headline-figures-ghost *,
.st-key-headline-line-ghost, .st-key-headline-line-ghost * { visibility: hidden !important; }
</style>"""  # a caption sets its own visibility: its ghost hides each element
