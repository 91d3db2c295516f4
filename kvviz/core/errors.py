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


class UserError(KvvizError):
    """Bad input or a limit reached, in one plain sentence built by kvviz (never a library's text).
    Every `raise` of bad input in kvviz raises one (or a subclass: TraceError, PlanError,
    ConfigError, NotServable, UnknownArchitecture, EngineError, RunTimeLimit, ...).

    Not a ValueError: `except UserError` catches refused input and nothing else, so a library's
    ValueError (a bug, or a library refusing something kvviz should have checked) is never taken
    for one. Code that also guards a library's ValueError names both, `except (UserError,
    ValueError)`, and shows the error through `visitor_message`, which gives a hosted visitor only
    UserErrors' words."""


GENERIC = "Something went wrong on the server; the details are in its log."

# What torch's allocators say when they fail: CUDA and MPS ("... out of memory ..."), the CPU
# allocator (c10's alloc_cpu: "DefaultCPUAllocator: can't allocate memory: you tried to ...").
OUT_OF_MEMORY_WORDS = ("out of memory", "can't allocate memory")


def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is a device or host running out of memory: torch's OutOfMemoryError (by class
    name: this module imports no torch), Python's MemoryError, or a RuntimeError in an allocator's
    words (older torch, MPS, the CPU allocator). The one out-of-memory test for every page."""
    if isinstance(exc, MemoryError) or any(c.__name__ == "OutOfMemoryError" for c in type(exc).__mro__):
        return True
    return isinstance(exc, RuntimeError) and any(w in str(exc).lower() for w in OUT_OF_MEMORY_WORDS)


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
