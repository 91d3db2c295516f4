"""Hosted mode's bounds on Streamlit's upload endpoint, which takes files for a session whether or
not a page's upload box asked for them, held per visitor.

Streamlit keeps every uploaded file in memory until its session ends (`server.disconnectedSessionTTL`
after the tab closes: 2 minutes by default), and checks only each request's size
(`server.maxUploadSize`). In hosted mode kvviz sets that size from the policy
(`Policy.server_upload_mib`, also on the command line by `kvviz.app.launch`) and bounds what the
endpoint holds, per visitor:

- a session (a tab) keeps its newest files within `SESSION_FILES` uploads' worth (an upload box
  holds one file: the one it replaced is let go);
- a client (one address, all its tabs together) holds at most `CLIENT_FILES` uploads' worth: one
  visitor's tabs cannot take what other visitors need;
- all clients together at most `SERVER_FILES` uploads' worth, the memory ceiling, which only
  several visitors at their full share reach together.

A file past a bound is not stored, and never answered with an HTTP error (Streamlit's upload box
would show its library text, "AxiosError: Request failed with status code 413"): the tab it came
from gets a sentence under its box (`upload_box`). Files another tab holds are never let go to
make room: that tab's page still holds them (Streamlit keeps a box's file in its widget state), so
dropping them would free no memory and break that page.

A client is the address Streamlit's server saw (uvicorn takes it from X-Forwarded-For when the
proxy is trusted: loopback, or `FORWARDED_ALLOW_IPS`; docs/deploy.md).
"""
from __future__ import annotations

import threading
from collections.abc import Callable

import streamlit as st
from streamlit import config
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from kvviz.app.hosted import Policy

SESSION_FILES = 2  # a session holds at most this many uploads' worth (the cap's bytes each)
CLIENT_FILES = 3  # a client, all its sessions together
SERVER_FILES = 16  # every client together: five visitors at their full share, and more
MIB = 2**20


def apply(policy: Policy) -> None:
    """In hosted mode: the per-request size from the policy, and the held bytes bounded (idempotent)."""
    if not policy.enabled:
        return
    mib = policy.server_upload_mib()
    if config.get_option("server.maxUploadSize") != mib:
        config.set_option("server.maxUploadSize", mib)
    if Runtime.exists():
        bound(Runtime.instance().uploaded_file_mgr, policy.max_upload_bytes)


def runtime_client(session_id: str) -> str:
    """The address a session's websocket came from ('' when unknown)."""
    client = Runtime.instance().get_client(session_id) if Runtime.exists() else None
    context = getattr(client, "client_context", None)
    return str(getattr(context, "remote_ip", None) or "")


class Shares:
    """Who holds what: session -> client, and the sentences owed to sessions whose upload was refused."""

    def __init__(self, manager, cap_bytes: int, client_of: Callable[[str], str]):
        self.manager, self.cap_bytes, self.client_of = manager, cap_bytes, client_of
        self.clients: dict[str, str] = {}  # session -> client
        self.notices: dict[str, str] = {}  # session -> why its latest upload was not kept
        self.lock = threading.Lock()

    def held(self, sessions=None) -> int:
        """Bytes the sessions hold (all sessions when None)."""
        storage = self.manager.file_storage
        return sum(len(f.data) for s in (list(storage) if sessions is None else sessions)
                   for f in list(storage.get(s, {}).values()))

    def sessions_of(self, client: str) -> list[str]:
        return [s for s in list(self.manager.file_storage) if self.clients.get(s, s) == client]

    def drop_oldest(self, session_id: str, room_bytes: int) -> None:
        """Remove the session's oldest files until it holds at most `room_bytes`."""
        files = dict(self.manager.file_storage.get(session_id, {}))  # insertion order: oldest first
        held = sum(len(f.data) for f in files.values())
        for file_id, rec in files.items():
            if held <= room_bytes:
                return
            self.manager.remove_file(session_id, file_id)
            held -= len(rec.data)

    def refusal(self, session_id: str, client: str, size: int) -> str | None:
        """Why a file of `size` bytes cannot be kept, after the session let its older ones go."""
        self.drop_oldest(session_id, SESSION_FILES * self.cap_bytes - size)
        mine = self.held(self.sessions_of(client))
        if mine + size > CLIENT_FILES * self.cap_bytes:
            return refused_for_visitor(CLIENT_FILES * self.cap_bytes, mine)
        if self.held() + size > SERVER_FILES * self.cap_bytes:
            return refused_for_server(SERVER_FILES * self.cap_bytes)
        return None

    def add(self, add_file, session_id: str, file) -> None:
        with self.lock:
            client = self.clients.setdefault(session_id, self.client_of(session_id) or session_id)
            why = self.refusal(session_id, client, len(file.data))
            if why is not None:
                self.notices[session_id] = why
                return
            add_file(session_id=session_id, file=file)
            self.notices.pop(session_id, None)

    def forget(self, session_id: str) -> None:
        with self.lock:
            self.clients.pop(session_id, None)
            self.notices.pop(session_id, None)


def refused_for_visitor(limit: int, held: int) -> str:
    return (f"This upload was not kept: your open kvviz tabs hold {held / MIB:.1f} MiB of uploads "
            f"already, and each visitor's tabs together keep at most {limit / MIB:g} MiB. Remove a "
            "file from another tab, or close it (its uploads are let go a few minutes later), then "
            "upload again.")


def refused_for_server(limit: int) -> str:
    return (f"This upload was not kept: this server keeps at most {limit / MIB:g} MiB of uploads from "
            "all its visitors at once, and it is full. Try again in a few minutes.")


def bound(manager, cap_bytes: int, client_of: Callable[[str], str] = runtime_client) -> None:
    """Wrap `manager.add_file` and `remove_session_files` (Streamlit's MemoryUploadedFileManager)
    with the per-session, per-client and server bounds, once."""
    if getattr(manager, "kvviz_shares", None) is not None:
        return
    shares = Shares(manager, cap_bytes, client_of)
    add_file, remove_session_files = manager.add_file, manager.remove_session_files

    def bounded_add_file(session_id: str, file) -> None:
        shares.add(add_file, session_id, file)

    def forgetting_remove_session_files(session_id: str) -> None:
        shares.forget(session_id)
        remove_session_files(session_id)

    manager.add_file, manager.remove_session_files = bounded_add_file, forgetting_remove_session_files
    manager.kvviz_shares = shares


def notice(session_id: str, manager=None) -> str | None:
    """The sentence owed to a session whose latest upload was not kept, else None."""
    if manager is None:
        manager = Runtime.instance().uploaded_file_mgr if Runtime.exists() else None
    shares = getattr(manager, "kvviz_shares", None)  # a stand-in runtime (AppTest's mock) answers anything
    return shares.notices.get(session_id) if isinstance(shares, Shares) else None


def upload_box(label: str, **kwargs):
    """`st.file_uploader` that says, under the box, why a file it shows was not kept."""
    upload = st.file_uploader(label, **kwargs)
    ctx = get_script_run_ctx()
    told = notice(ctx.session_id) if ctx is not None else None
    if told and upload is None:
        st.warning(told, icon=":material/block:")
    return upload
