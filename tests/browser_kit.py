"""What every real-browser test needs: Chromium or a clear failure, and the app served for real.

The server and Chromium's flags live in bench.app_server (the page benchmarks use them too).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from bench.app_server import CHROMIUM, IDLE, ROOT, Server, chromium_context  # noqa: F401 (re-exported)

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


def tiny_as_default(cache: Path, kind: str = "llama") -> None:
    """The tiny Llama (or `kind`, tests/tiny.py) saved where kvviz keeps the converted default model, with its marker
    (hosted mode's only model is then tiny and fast)."""
    from tiny import save_tiny

    from kvviz.core import files
    from kvviz.engine import models
    folder = cache / models.DEFAULT_FOLDER
    folder.mkdir(parents=True)
    save_tiny(folder, kind)
    sizes = {p.name: p.stat().st_size for p in folder.iterdir() if p.is_file()}
    files.write_atomic(folder / models.MARKER, json.dumps({"source": "tiny", "sizes": sizes}))


def served_hosted_tiny(tmp_path_factory, name: str, ports: range, env_extra: dict | None = None,
                       kind: str = "llama"):
    """`streamlit run app.py` in hosted mode whose default model is the tiny Llama (or `kind`; torch
    on one thread; log: {name}-streamlit.log), stopped by pid after the module. Yields the Server."""
    require_chromium()
    cache = tmp_path_factory.mktemp(f"kvviz-cache-{name}")
    tiny_as_default(cache, kind)
    env = {"KVVIZ_HOSTED": "1", "KVVIZ_CACHE_DIR": str(cache), "KVVIZ_TORCH_THREADS": "1", **(env_extra or {})}
    with Server(env, ports, ARTIFACTS / f"{name}-streamlit.log") as served:
        yield served


# ---------------------------------------------------------------- waiting for a page to hold still
# True once the page has held still for `ms`: the script idle, every chart drawn (or folded away in
# a closed expander, or a hidden preload), and no chart's box or drawing resized since the last
# poll; with `fit`, also every drawing as wide as its box (a window just resized: the charts
# re-embed at the new width), unless that has not come within FIT_MS. Call STEADY_RESET first.
STEADY = """([idle, ms, fit, fitMs]) => {
  const now = performance.now();
  const charts = [...document.querySelectorAll('[data-testid=stVegaLiteChart]')].map(el => {
    const svg = el.querySelector('svg.marks'), w = el.getBoundingClientRect().width;
    return {w, h: el.getBoundingClientRect().height, svg: svg ? svg.getBoundingClientRect().width : null,
            drawn: !!(svg || el.querySelector('canvas')) || !!el.closest('details:not([open])')
                   || el.getBoundingClientRect().height < 20};
  });
  const grids = [...document.querySelectorAll('[data-testid=stDataFrame]')].map(el => {  // tables lay out late too
    const scroller = el.querySelector('.dvn-scroller');
    return [el.getBoundingClientRect().width, scroller ? scroller.getBoundingClientRect().width : null];
  });
  const state = (document.querySelector(idle) ? 'idle ' : 'busy ') + JSON.stringify([charts, grids]);
  const fit1 = c => c.svg === null || c.w < 20 || Math.abs(c.svg - c.w) <= 2;
  window.kvvizWaitSince ??= now;
  // a chart that did not fit its box before (FITTED, drawn at a fixed width) is not waited for
  const fits = charts.every((c, i) => (window.kvvizFitted || [])[i] === false || fit1(c))
               && grids.every(([w, inner]) => inner === null || inner <= w + 2);
  const ready = document.querySelector(idle) && charts.every(c => c.drawn)
                && (!fit || fits || now - window.kvvizWaitSince > fitMs);
  if (!ready || state !== window.kvvizState) { window.kvvizState = state; window.kvvizStill = now; return false; }
  return now - window.kvvizStill >= ms;
}"""
STEADY_RESET = "() => { window.kvvizState = null; window.kvvizWaitSince = null; }"
STILL_MS = 300  # held still this long: the script's last message and the charts' embeds are in
FIT_MS = 3_000
# Set when the app's script starts running, however short the run (a mutation record keeps the
# state it replaced; polling for "running" can miss a run shorter than a poll).
WATCH_RUNS = """() => {
  window.kvvizRan = false;
  const app = document.querySelector('[data-testid=stApp]');
  new MutationObserver(records => {
    if (records.some(r => r.oldValue === 'running') || app.dataset.testScriptState === 'running')
      window.kvvizRan = true;
  }).observe(app, {attributes: true, attributeFilter: ['data-test-script-state'], attributeOldValue: true});
}"""


def steady(page, timeout_ms: int, fit: bool = False) -> None:
    """The script has run and stopped; the charts it wrote have been drawn and hold still (with
    `fit`: at their boxes' widths). Ends STILL_MS after the page last changed, not after fixed sleeps."""
    page.evaluate(STEADY_RESET)
    page.wait_for_function(STEADY, arg=[IDLE, STILL_MS, fit, FIT_MS], timeout=timeout_ms, polling=50)


def run_and_hold_still(page, target, timeout_ms: int) -> None:
    """Click `target` (a locator), wait for the script run it starts (however short), then `steady`."""
    page.evaluate(WATCH_RUNS)
    target.click()
    page.wait_for_function("() => window.kvvizRan", timeout=60_000, polling=100)
    steady(page, timeout_ms)
