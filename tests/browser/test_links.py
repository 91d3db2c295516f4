"""What a visitor's browser meets off the default path (real `streamlit run` + Chromium, tiny model):

* a Sweep grid (3 prompt lengths × 2 batch sizes) shared by the page's link and reopened in a fresh
  browser context (1280 x 720) shows the whole grid, a sweep run from it measures all six points,
  and its result tables need no horizontal scrolling;
* no page load requests anything from a host other than the app's (favicon, fonts, icons);
* Replay in presenter mode fits the screen at 1280 x 720 and 1920 x 1080: its headline figures,
  both texts and the cache map start above the fold.

Uses Debian's /usr/bin/chromium; without it the module skips, except under CI (env CI set).
"""
from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from browser_kit import ARTIFACTS, launched_chromium, served_tiny_app

from kvviz.app import links
from bench.app_server import IDLE

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PORTS = range(8661, 8670)
LOAD_MS = 240_000
RUN_MS = 300_000
GRID = {"sweep_prompts": ["32", "64", "128"], "sweep_batches": ["1", "2"]}
PAGES = ["/", "/replay", "/shrink", "/sweep", "/serving", "/planner", "/engine"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from served_tiny_app(tmp_path_factory, "links", PORTS)


@pytest.fixture(scope="module")
def browser(server):
    yield from launched_chromium()


def fresh_page(browser, width: int = 1600, height: int = 1000):
    return browser.new_context(viewport={"width": width, "height": height}).new_page()


def settle(page, ready: str = "h1", timeout_ms: int = LOAD_MS) -> None:
    page.wait_for_selector(ready, timeout=timeout_ms)
    page.wait_for_timeout(1000)
    page.wait_for_selector(IDLE, timeout=timeout_ms)
    page.wait_for_timeout(1000)


def chips(page, label: str) -> list[str]:
    box = page.get_by_test_id("stMultiSelect").filter(has_text=label)
    return box.locator(".react-aria-ComboBox [data-tag]").evaluate_all("els => els.map(e => e.ariaLabel)")


def share_link(page) -> str:
    return page.get_by_test_id("stSidebar").get_by_test_id("stCode").last.inner_text().strip()


def test_a_sweep_grid_link_reopens_as_the_whole_grid(server, browser):
    first = fresh_page(browser)
    try:
        first.goto(f"{server}/sweep?{links.encode([(k, v) for k, vs in GRID.items() for v in vs])}")
        settle(first)
        link = share_link(first)
    finally:
        first.context.close()
    pairs = links.decode(urlsplit(link).query)
    assert sorted((v for k, v in pairs if k == "sweep_prompts"), key=int) == GRID["sweep_prompts"], link
    page = fresh_page(browser, 1280, 720)  # a fresh context: no cookie, no session, only the link
    try:
        page.goto(link)
        settle(page)
        assert sorted(chips(page, "Prompt lengths"), key=int) == GRID["sweep_prompts"]
        assert chips(page, "Batch sizes") == GRID["sweep_batches"]
        page.get_by_role("button", name="Run sweep", exact=True).click()
        page.wait_for_timeout(1000)
        page.wait_for_selector(IDLE, timeout=RUN_MS)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(ARTIFACTS / "link-sweep-grid.png"), full_page=True)
        table = page.get_by_test_id("stDataFrame").first.locator("[aria-rowcount]").first
        assert int(table.get_attribute("aria-rowcount")) - 1 == 6  # header row + one row per point
        widths = page.get_by_test_id("stDataFrame").evaluate_all(  # beside the sidebar at 1280 px
            "els => els.map(e => { const s = e.querySelector('.dvn-scroller'); return [s.scrollWidth, s.clientWidth] })")
        print("sweep tables (scroll, client px):", widths)
        assert len(widths) >= 2 and all(scroll <= client + 1 for scroll, client in widths), widths  # no column cut
    finally:
        page.context.close()


def test_no_page_load_reaches_another_host(server, browser):
    own = urlsplit(server).netloc
    elsewhere = {}
    for path in PAGES:
        page = fresh_page(browser)
        seen = []
        page.on("request", lambda r: seen.append(r.url))
        try:
            page.goto(f"{server}{path}")
            settle(page)
            others = [u for u in seen if urlsplit(u).scheme in ("http", "https", "ws", "wss")
                      and urlsplit(u).netloc != own]
            if others:
                elsewhere[path] = others
            assert seen, path  # the listener saw the page's own requests
            icon = page.locator("link[rel*=icon]").first.get_attribute("href")
            assert icon and urlsplit(icon).netloc in ("", own), icon
        finally:
            page.context.close()
    assert not elsewhere, elsewhere


@pytest.mark.parametrize("width, height", [(1280, 720), (1920, 1080)])
def test_replay_in_presenter_mode_fits_the_screen(server, browser, width, height):
    """The headline figures, both texts and the cache map start above the fold, as on Live."""
    page = fresh_page(browser, width, height)
    try:
        page.goto(f"{server}/replay?present=1")
        settle(page, ready="[data-testid=stMetric]")
        page.screenshot(path=str(ARTIFACTS / f"present-replay-{width}x{height}.png"))
        boxes = {key: page.locator(f".st-key-{key}").bounding_box()
                 for key in ("cached-panel", "recompute-panel", "cache-map-panel")}
        print(f"{width}x{height}", {k: (round(b["y"]), round(b["height"])) for k, b in boxes.items() if b})
        for key, box in boxes.items():  # each panel's title and first lines on screen, no scrolling
            seen_px = 400 if key == "cache-map-panel" else 120  # the map's legend, layers and axis
            assert box and box["y"] >= 0 and box["y"] + min(box["height"], seen_px) <= height, (key, box)
        assert page.get_by_test_id("stMetric").first.bounding_box()["y"] < height / 3
        assert page.get_by_role("button", name="Play").bounding_box()["y"] < height / 4  # controls: one row
    finally:
        page.context.close()
