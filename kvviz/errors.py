"""kvviz's own errors, and what a visitor may see of any error. Pure; stdlib only.

Only a `UserError` (kvviz's own sentence about what the visitor typed, pasted, uploaded or a link
carried) may reach a hosted visitor in its own words. Any other exception, a library's above all,
is shown as one generic sentence and its type and text go to the server log: a library's message
can quote paths, internals or the input itself.
"""
from __future__ import annotations

import linecache
import logging

log = logging.getLogger("kvviz")


class KvvizError(Exception):
    """Base of the errors kvviz raises on purpose."""


class UserError(KvvizError, ValueError):
    """Bad input, in one plain sentence built by kvviz (never the input itself, never a library's
    text). A ValueError too, so callers that catch ValueError keep working."""


GENERIC = "Something went wrong on the server; the details are in its log."


def visitor_message(exc: BaseException, hosted: bool, context: str = "") -> str:
    """What a visitor may read about `exc`: a UserError's text; otherwise, when hosted, one
    generic sentence (and a log line with the details); on your own machine, type and first line."""
    if isinstance(exc, UserError) or raised_by_kvviz(exc):
        return str(exc)
    log.warning("%s%s: %s", f"{context}: " if context else "", type(exc).__name__, exc)
    if hosted:
        return GENERIC
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def raised_by_kvviz(exc: BaseException) -> bool:
    """True for a ValueError that a `raise` statement in kvviz's own code built (kvviz's modules
    predate UserError and raise ValueError with their own sentences). A ValueError from a library,
    or from a builtin called in kvviz (int("..."): its last frame is a kvviz line that is not a
    `raise`), is not."""
    if not isinstance(exc, ValueError) or exc.__traceback__ is None:
        return False
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    frame = tb.tb_frame
    if not str(frame.f_globals.get("__name__", "")).startswith("kvviz"):
        return False
    return linecache.getline(frame.f_code.co_filename, tb.tb_lineno).strip().startswith("raise ")
