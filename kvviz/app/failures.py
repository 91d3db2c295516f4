"""What a visitor reads when a run fails midway: a sentence, never a traceback (the details are
logged; on your own machine the error's first line is shown too)."""
from __future__ import annotations

import logging

from kvviz.app import ui
from kvviz.core import errors

LOG = logging.getLogger("kvviz")


def failure_message(exc: Exception, hide_details: bool) -> str:
    """What the user reads when a run fails midway; hosted visitors get no internals."""
    if errors.out_of_memory(exc):
        return ("The device ran out of memory during this run; what was produced is kept and the "
                "memory was released. Try fewer tokens, a smaller batch, or a smaller model.")
    if hide_details:
        LOG.exception("generation failed")
        return "Generation stopped because of an internal error. What was produced is kept."
    return f"Generation stopped: {type(exc).__name__}: {ui.inert(str(exc).splitlines()[0][:300])}"
