"""kvviz's own errors, and what a visitor may see of any error. Pure; stdlib only.

Only a `UserError` (kvviz's own sentence about what the visitor typed, pasted, uploaded or a link
carried) may reach a hosted visitor in its own words. Any other exception, a library's above all,
is shown as one generic sentence and its type and text go to the server log: a library's message
can quote paths, internals or the input itself.
"""
from __future__ import annotations

import logging

log = logging.getLogger("kvviz")


class KvvizError(Exception):
    """Base of the errors kvviz raises on purpose."""


class UserError(KvvizError, ValueError):
    """Bad input, in one plain sentence built by kvviz (never a library's text). Every `raise` of
    bad input in kvviz raises one (or a subclass: TraceError, PlanError, ConfigError, NotServable,
    UnknownArchitecture, EngineError, ...). A ValueError too, so callers that catch ValueError keep
    working; what a caller shows a visitor is `visitor_message`, which tells the two apart."""


GENERIC = "Something went wrong on the server; the details are in its log."


def visitor_message(exc: BaseException, hosted: bool, context: str = "") -> str:
    """What a visitor may read about `exc`: a UserError's text; otherwise, when hosted, one
    generic sentence (and a log line with the details); on your own machine, type and first line."""
    if isinstance(exc, UserError):
        return str(exc)
    log.warning("%s%s: %s", f"{context}: " if context else "", type(exc).__name__, exc)
    if hosted:
        return GENERIC
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
