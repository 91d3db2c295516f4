"""What every real-browser test needs: Chromium or a clear failure, and the app served for real.

The server and Chromium's flags live in kvviz.bench.app_server (the page benchmarks use them too).
"""
from __future__ import annotations

import os

import pytest

from kvviz.bench.app_server import CHROMIUM, ROOT, Server, chromium_context  # noqa: F401 (re-exported)

ARTIFACTS = ROOT / "test-artifacts"


def require_chromium() -> None:
    """Fail under CI (env CI set) when Debian's Chromium is missing; skip elsewhere."""
    if CHROMIUM.exists():
        return
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is missing; CI must install Debian's chromium")
    pytest.skip(f"{CHROMIUM} is missing (install Debian's chromium to run browser tests)")


def served_app(log_name: str, env_extra: dict | None = None, ports: range | None = None):
    """`streamlit run app.py` for a test module (log in test-artifacts/), stopped by pid after it."""
    require_chromium()
    with Server(env_extra, ports, ARTIFACTS / log_name) as server:
        yield server.url
