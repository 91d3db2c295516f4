"""The cache map in a real browser: `streamlit run app.py` on a free port, driven by Chromium.

On the embedded default model (SmolLM2-135M, 30 layers): while a run is going the map is drawn
and gains columns (one per cached position: this run is short enough not to be binned); hovering
a column shows its token's text; after the run the map is whole and no error is on the page.
Then a tiny Gemma 3 (5 sliding layers, 1 full), loaded by a link: its sliding layers' dropped
positions are drawn grey and the axis names each layer's kind.
Screenshots (1600 x 1000) land in test-artifacts/cache-map-*.png.

Uses Debian's /usr/bin/chromium; without it the tests skip, except under CI (env CI set), where
they fail. Waits are bounded and generous: the machine may be a loaded 2-core box.
"""
from __future__ import annotations

import re
import time
from urllib.parse import quote

import pytest
from browser_kit import ARTIFACTS, button
from tests.browser.test_live import IDLE, LOAD_MS, RUN_MS, RUNNING

pytestmark = [pytest.mark.browser, pytest.mark.slow]

VIEWPORT = {"width": 1600, "height": 1000}
MAP = ".st-key-cache-map-panel [data-testid='stVegaLiteChart']"
# Rectangles drawn in the map's SVG (the cells' runs plus one invisible hover column per position).
COUNT_RECTS = """el => [...el.querySelectorAll('g.role-mark.mark-rect')]
    .reduce((n, g) => n + g.childElementCount, 0)"""


@pytest.fixture(scope="module")
def server(default_app):
    """The session's server on the default model (tests/browser/conftest.py)."""
    return default_app


@pytest.fixture(scope="module")
def page(server, chromium):
    from playwright.sync_api import expect

    context = chromium.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        # fp32, no race (the map is about the cached run), 40 tokens in slow motion ×4: long
        # enough to watch on a quiet machine too (at real time a quiet run ended between two
        # looks: the map was seen at 101 rectangles only)
        page.goto(f"{server}/?dtype=float32&race=false&max_new=40&pace={quote('Slow motion ×4')}")
        expect(button(page, "Generate")).to_be_enabled(timeout=LOAD_MS)
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
        yield page
    finally:
        context.close()


def rect_count(page) -> int:
    """Rectangles in the cache map now (0 while it is absent or being swapped)."""
    try:
        chart = page.locator(MAP)
        return chart.first.evaluate(COUNT_RECTS) if chart.count() else 0
    except Exception:  # the placeholder replaced its element between count and evaluate
        return 0


def test_the_cache_map_renders_and_gains_columns_during_a_run(page):
    from playwright.sync_api import expect

    button(page, "Generate").click()
    page.wait_for_selector(RUNNING, timeout=60_000)
    seen: list[int] = []
    deadline = time.monotonic() + RUN_MS / 1000
    while time.monotonic() < deadline and page.locator(RUNNING).count():
        count = rect_count(page)
        if count and (not seen or count > seen[-1]):
            seen.append(count)
            if len(seen) == 3:
                page.locator(".st-key-cache-map-panel").scroll_into_view_if_needed()
                page.screenshot(path=str(ARTIFACTS / "cache-map-running.png"))
        time.sleep(0.1)
    page.wait_for_selector(IDLE, timeout=RUN_MS)
    final = rect_count(page)
    # two growing counts seen while the run was going prove it draws live; how many depends on the
    # machine's load (CI ran it beside the whole suite: 101 then 188, then the run ended)
    assert len(seen) >= 2, f"the map grew only through {seen} rectangles while the run was going"
    assert final >= seen[-1] and final > 40, final  # one hover column per cached position at least
    box = page.locator(MAP).first.bounding_box()
    assert box and box["width"] > 600 and box["height"] > 200
    caption = page.locator(".st-key-cache-map-panel [data-testid='stCaptionContainer']").first.inner_text()
    assert "positions cached" in caption and "All 30 layers are full attention" in caption
    assert page.get_by_test_id("stException").count() == 0
    assert page.get_by_test_id("stAlertContentError").count() == 0
    page.locator(".st-key-cache-map-panel").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "cache-map-final.png"))

    # Hover near the right end of the drawn part: the tooltip names a generated column and its text.
    plot = page.locator(f"{MAP} svg g.mark-rect.role-mark").last
    last_column = plot.locator("path").last
    last_column.hover(force=True)
    tooltip = page.locator("#vg-tooltip-element")
    expect(tooltip).to_be_visible(timeout=10_000)
    assert "generated" in tooltip.inner_text() and "position" in tooltip.inner_text()
    page.screenshot(path=str(ARTIFACTS / "cache-map-hover.png"))


COUNT_DROPPED = """el => [...el.querySelectorAll('g.role-mark.mark-rect path')]
    .filter(p => (p.getAttribute('fill') || '').toLowerCase() === '#d9d9d9').length"""


def test_sliding_layers_drop_their_oldest_positions_on_screen(page, server, tmp_path_factory):
    """A tiny Gemma 3 (5 sliding layers of window 6, 1 full) loaded by link: grey cells appear."""
    from playwright.sync_api import expect
    from tiny import save_arch

    folder = save_arch(tmp_path_factory.mktemp("tiny-gemma3"), "gemma3_text")
    page.goto(f"{server}/?model={folder}&dtype=float32&race=false&max_new=16")
    page.get_by_role("button", name=re.compile("^Load ")).click(timeout=LOAD_MS)
    expect(button(page, "Generate")).to_be_enabled(timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    button(page, "Generate").click()
    page.wait_for_selector(RUNNING, timeout=60_000)
    page.wait_for_selector(IDLE, timeout=RUN_MS)
    chart = page.locator(MAP).first
    expect(chart.locator("svg")).to_be_visible(timeout=30_000)
    assert chart.evaluate(COUNT_DROPPED) >= 2 * 5  # K and V rows of each sliding layer
    caption = page.locator(".st-key-cache-map-panel [data-testid='stCaptionContainer']").first.inner_text()
    assert "5 × sliding 6" in caption and "dropped" in caption
    assert "sliding 6" in chart.inner_html()  # the layer axis names each layer's kind
    page.locator(".st-key-cache-map-panel").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "cache-map-sliding.png"))
