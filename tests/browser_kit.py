"""What every real-browser test needs: Chromium or a clear failure, and the app served for real.

The server and Chromium's flags live in bench.app_server (the page benchmarks use them too).
"""
from __future__ import annotations

import os

import pytest

from bench.app_server import CHROMIUM, ROOT, Server, chromium_context  # noqa: F401 (re-exported)

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


def served_tiny_app(tmp_path_factory, name: str, ports: range):
    """`served_app` with a tiny random Llama saved as the host's model (log: {name}-streamlit.log)."""
    from tiny import save_tiny

    require_chromium()
    model_dir = save_tiny(tmp_path_factory.mktemp(f"tiny-llama-{name}"))
    yield from served_app(f"{name}-streamlit.log", {"KVVIZ_MODEL": str(model_dir)}, ports)


def launched_chromium():
    """Debian's Chromium through playwright for a test module, closed after it."""
    from playwright.sync_api import sync_playwright

    from bench.app_server import CHROMIUM_ARGS
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def open_sidebar(page) -> None:
    """Expand the sidebar where it starts closed (hosted mode, a narrow screen, presenter mode)."""
    if page.get_by_test_id("stSidebar").get_attribute("data-collapsed") == "true":
        page.get_by_test_id("stExpandSidebarButton").click()
        page.wait_for_function("() => document.querySelector('[data-testid=stSidebar]')"
                               ".getAttribute('data-collapsed') === 'false'", timeout=10_000)
