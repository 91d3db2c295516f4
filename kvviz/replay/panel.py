"""The Replay page's widgets: the trace's file box and its reading, the line saying where a trace
came from, and the playback's player and buttons (kvviz.replay.player keeps which step shows).

What the Replay page shares with other pages stays in kvviz.app.ui: the speeds (Shrink's and the
vLLM watch's replays use them too), the shipped example traces (the Live page's tour reads one)
and the upload caps (every upload box): a feature never imports another (tests/test_contracts.py).
"""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from kvviz.app import keys, ui, uploads
from kvviz.core.trace import Trace, TraceError, check_run_meta
from kvviz.replay import player


def replay_player(trace: Trace, speed: float) -> player.Player:
    """The Replay page's playback of `trace`'s cached steps at `speed` (kvviz.replay.player)."""
    return player.Player(st.session_state, [e.step_ms for e in trace.events_of("cached")], speed)


def replay_buttons(column, playback: player.Player) -> None:
    """Back a step, Play / Pause, forward a step, in one row, each with its key (kvviz.app.keys)."""
    with column.container(horizontal=True, gap="small", key="replay-buttons"):
        st.button("", icon=":material/chevron_left:", key="replay_back", shortcut=keys.STEP_BACK,
                  help="One step back", on_click=playback.step, args=(-1,), disabled=playback.steps < 2)
        st.button("Pause" if playback.playing else "Play", type="primary", key="replay_play", shortcut=keys.PLAY,
                  on_click=playback.toggle)
        st.button("", icon=":material/chevron_right:", key="replay_forward", shortcut=keys.STEP_FORWARD,
                  help="One step forward", on_click=playback.step, args=(1,), disabled=playback.steps < 2)


def read_trace(path: Path | None, upload) -> Trace | None:
    """An example trace or an uploaded file, validated (TraceError says what is wrong)."""
    if upload is not None:
        limit = ui.upload_limit_bytes()
        if upload.size > limit:  # checked before a byte of the file is read
            raise TraceError(f"the file is {upload.size / 2**20:.1f} MiB; traces are limited to "
                             f"{limit / 2**20:g} MiB here")
        trace = Trace.from_json(upload.getvalue())
    elif path is not None:
        trace = ui.cached_example(str(path))
    else:
        return None
    check_run_meta(trace)
    return trace


def trace_uploader():
    """The Replay page's file box; its label states kvviz's cap in MiB, which `read_trace`
    enforces in bytes before reading. Streamlit's own box limit is set above it
    (`ui.uploader_limit_mb`) so a file over the cap gets kvviz's sentence, never Streamlit's."""
    limit = ui.upload_limit_bytes()
    return uploads.upload_box(f"A kvviz trace (JSON, at most {limit / 2**20:g} MiB = {limit:,} bytes)",
                              type=["json"], key="replay_upload",
                              max_upload_size=ui.uploader_limit_mb(limit))


def trace_origin(trace: Trace) -> str:
    m = trace.meta
    return (f"Recorded with {ui.inert(m.model_label or m.model or '?')} on "
            f"{ui.inert(m.device or '?')} in {ui.inert(m.dtype or '?')}; "
            f"prompt {m.prompt_tokens} tokens × batch {m.batch}; "
            f"{len(trace.events_of('cached'))} steps"
            f"{', with a no-cache run' if 'recompute' in trace.modes else ''}.")
