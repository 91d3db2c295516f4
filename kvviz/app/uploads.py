"""Hosted mode's bounds on Streamlit's upload endpoint, which takes files for a session whether or
not a page's upload box asked for them.

Streamlit keeps every uploaded file in memory until its session ends (`server.disconnectedSessionTTL`
after the tab closes: 2 minutes by default), and checks only each request's size
(`server.maxUploadSize`). In hosted mode kvviz sets that size from the policy
(`Policy.server_upload_mib`, also on the command line by `kvviz.app.launch`) and bounds what the
endpoint holds: a session keeps only its newest files within `SESSION_FILES` uploads' worth (older
ones are dropped: an upload box holds one file), and all sessions together at most `SERVER_FILES`
uploads' worth (past it, an upload is refused with HTTP 413 until sessions end).
"""
from __future__ import annotations

import threading

from starlette.exceptions import HTTPException
from streamlit import config
from streamlit.runtime import Runtime

from kvviz.app.hosted import Policy

SESSION_FILES = 2  # a session holds at most this many uploads' worth (the cap's bytes each)
SERVER_FILES = 8  # every session together


def apply(policy: Policy) -> None:
    """In hosted mode: the per-request size from the policy, and the held bytes bounded (idempotent)."""
    if not policy.enabled:
        return
    mib = policy.server_upload_mib()
    if config.get_option("server.maxUploadSize") != mib:
        config.set_option("server.maxUploadSize", mib)
    if Runtime.exists():
        bound(Runtime.instance().uploaded_file_mgr, policy.max_upload_bytes)


def bound(manager, cap_bytes: int) -> None:
    """Wrap `manager.add_file` (Streamlit's MemoryUploadedFileManager) with the two bounds, once."""
    if getattr(manager, "kvviz_bounded", False):
        return
    add_file, lock = manager.add_file, threading.Lock()

    def bounded_add_file(session_id: str, file) -> None:
        with lock:
            drop_oldest(manager, session_id, SESSION_FILES * cap_bytes - len(file.data))
            if held_bytes(manager) + len(file.data) > SERVER_FILES * cap_bytes:
                raise HTTPException(status_code=413, detail="Uploads are full; try again in a few minutes")
            add_file(session_id=session_id, file=file)

    manager.add_file, manager.kvviz_bounded = bounded_add_file, True


def drop_oldest(manager, session_id: str, room_bytes: int) -> None:
    """Remove the session's oldest files until it holds at most `room_bytes`."""
    files = dict(manager.file_storage.get(session_id, {}))  # insertion order: oldest first
    held = sum(len(f.data) for f in files.values())
    for file_id, rec in files.items():
        if held <= room_bytes:
            return
        manager.remove_file(session_id, file_id)
        held -= len(rec.data)


def held_bytes(manager) -> int:
    return sum(len(f.data) for files in list(manager.file_storage.values()) for f in list(files.values()))
