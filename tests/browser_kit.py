"""What every real-browser test needs: Chromium or a clear failure, and the app served for real.

The server and Chromium's flags live in bench.app_server (the page benchmarks use them too).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

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
    from bench.app_server import CHROMIUM_ARGS, playwright
    browser = playwright().chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()


def button(page, label: str):
    """The button labelled `label`, whether or not it shows a keyboard shortcut (a button with one is
    named "Generate Shortcut G" for assistive technology: kvviz.app.keys)."""
    return page.get_by_role("button", name=re.compile(rf"^{re.escape(label)}( Shortcut \S+)?$"))


def open_sidebar(page) -> None:
    """Expand the sidebar where it starts closed (hosted mode, a narrow screen, presenter mode)."""
    if page.get_by_test_id("stSidebar").get_attribute("data-collapsed") == "true":
        page.get_by_test_id("stExpandSidebarButton").click()
        page.wait_for_function("() => document.querySelector('[data-testid=stSidebar]')"
                               ".getAttribute('data-collapsed') === 'false'", timeout=10_000)


def tiny_as_default(cache: Path) -> None:
    """The tiny Llama saved where kvviz keeps the converted default model, with its marker
    (hosted mode's only model is then tiny and fast)."""
    from tiny import save_tiny

    from kvviz.core import files
    from kvviz.engine import models
    folder = cache / models.DEFAULT_FOLDER
    folder.mkdir(parents=True)
    save_tiny(folder)
    sizes = {p.name: p.stat().st_size for p in folder.iterdir() if p.is_file()}
    files.write_atomic(folder / models.MARKER, json.dumps({"source": "tiny", "sizes": sizes}))


def served_hosted_tiny(tmp_path_factory, name: str, ports: range, env_extra: dict | None = None):
    """`streamlit run app.py` in hosted mode whose default model is the tiny Llama (torch on one
    thread; log: {name}-streamlit.log), stopped by pid after the module. Yields the Server."""
    require_chromium()
    cache = tmp_path_factory.mktemp(f"kvviz-cache-{name}")
    tiny_as_default(cache)
    env = {"KVVIZ_HOSTED": "1", "KVVIZ_CACHE_DIR": str(cache), "KVVIZ_TORCH_THREADS": "1", **(env_extra or {})}
    with Server(env, ports, ARTIFACTS / f"{name}-streamlit.log") as served:
        yield served
