"""A place for one element that keeps what the previous script run drew there until it is redrawn.

`st.empty()` sends an empty element at once: on a rerun it blanks the chart that stood in its
place, and the chart drawn there next mounts afresh, so its Vega view re-embeds and the panel
collapses to its title for ~1 s (measured at 1920 x 1080: the cache map 434 -> 78 px, the
timings panel 859 -> 35 px). A container instead keeps its children when the rerun sends it
again (Streamlit's frontend hands a re-sent block of the same type its old children), and the
first element this run draws into it replaces the old one in place: a chart with the same Vega-Lite
dict only swaps its data. Imports no streamlit: the caller hands the parent (st or a container).

For elements that are drawn and never emptied. An emptied slot keeps an empty element, and a
container with any child takes a gap (1 rem) where an empty `st.empty()` takes none: lines that
come and go (a wait line, a note) stay in `st.empty()`.
"""
from __future__ import annotations


SKIPPED_WHEN_SAME = frozenset({"caption", "code", "markdown", "metric", "text", "success", "warning", "info"})
# Text elements whose arguments are plain values: drawn again with the same ones, they are not
# sent. The live page redraws its figures and captions several times a second, most of them
# unchanged; each one sent costs the script thread a message (while a fast model's worker waits
# for the interpreter) and the browser a render.


class Slot:
    """`slot.caption(...)`, `slot.vega_lite_chart(...)`, ...: each call replaces the element
    shown; the first one replaces the previous script run's element, if any. A text element
    (SKIPPED_WHEN_SAME) drawn again exactly as it stands is left alone."""

    def __init__(self, parent):
        self._box = parent.container()
        self._element = None  # the element's own handle once drawn: later calls replace it
        self._shown: tuple | None = None  # (method, args, kwargs) of the element drawn last

    def __getattr__(self, name: str):
        target = getattr(self._element if self._element is not None else self._box, name)

        def draw(*args, **kwargs):
            call = (name, args, kwargs)
            if name in SKIPPED_WHEN_SAME and self._element is not None and same_call(call, self._shown):
                return self._element  # already on the page as asked
            self._element, self._shown = target(*args, **kwargs), call
            return self._element
        return draw


def same_call(call: tuple, shown: tuple | None) -> bool:
    """Whether two (method, args, kwargs) are equal; False where they cannot be compared."""
    try:
        return bool(call == shown)
    except (TypeError, ValueError):  # e.g. a DataFrame among the arguments
        return False
