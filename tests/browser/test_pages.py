"""Every page in a real browser: `streamlit run app.py` on a tiny local model, driven by Chromium.

One server for the module (a tiny random Llama as the host's model, so runs take seconds), each
test in its own browser context. What is checked is what a visitor meets:

* a link to a page other than the first (`/replay`), opened in a fresh browser on a fresh server,
  gets the app's own navigation and app.py's setup (presenter mode's closed sidebar), not
  Streamlit's file-name navigation (which a `pages/` folder beside app.py would trigger);
* presenter mode: no metric label or value is cut at 1280 x 720 or 1920 x 1080 (scrollWidth
  against clientWidth), and on the Live page the headline, both texts and the cache map fit the
  screen without scrolling;
* the Serving page's pool grid changes while its run is still going (drawn live, not replayed);
* at 1600 x 1000 and 1280 x 720 no element on any page clips its content or sticks out of the page.

Uses Debian's /usr/bin/chromium; without it the module skips, except under CI (env CI set),
where it fails. Waits are generous (a shared 2-core machine); no speed is asserted.
"""
from __future__ import annotations

import hashlib
import time

import pytest
import browser_kit
from browser_kit import ARTIFACTS, ROOT, launched_chromium, open_sidebar, served_tiny_app

from bench.app_server import IDLE, RUNNING

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PORTS = range(8641, 8650)
LOAD_MS = 240_000  # a page's first script run on a loaded machine (imports, the tiny model)
RUN_MS = 300_000
APP_PAGES = ["Live", "Replay", "Shrink", "Sweep", "Serving", "Capacity planner", "vLLM engine"]

CUT_METRIC_TEXT = """() => [...document.querySelectorAll(
    '[data-testid=stMetric] [data-testid=stMetricLabel], [data-testid=stMetric] [data-testid=stMetricValue],'
    + '[data-testid=stMetric] .stMarkdownEllipsis, [data-testid=stMetric] p')]
  .filter(e => e.scrollWidth > e.clientWidth + 1)
  .map(e => `${e.innerText} (${e.scrollWidth} > ${e.clientWidth} px)`)"""

# Elements that hide part of their content (overflow hidden or clip, content wider or taller
# than the box), and elements that stick out past the right edge of the page. Scrollers
# (overflow auto / scroll: tables, code) are meant to scroll and are left alone.
CLIPPED_OR_OUT = """() => {
  const main = document.querySelector('[data-testid=stMain]');
  const right = main.getBoundingClientRect().right;
  const found = [];
  const unseen = e => {  // inside a box of at most 2 px: nothing shown, or text for screen readers
    for (let n = e; n && n !== main; n = n.parentElement) {
      const b = n.getBoundingClientRect();
      if (b.width <= 2 || b.height <= 2) return true;
    }
    return false;
  };
  const insideScroller = e => {  // a table's or code block's content, scrolled in its own box
    for (let n = e.parentElement; n && n !== main; n = n.parentElement)
      if (['auto', 'scroll'].includes(getComputedStyle(n).overflowX)) return true;
    return false;
  };
  for (const e of main.querySelectorAll('*')) {
    const r = e.getBoundingClientRect();
    if (unseen(e)) continue;
    const cs = getComputedStyle(e);
    const hides = ['hidden', 'clip'];
    const label = e.getAttribute('aria-label') || e.getAttribute('type') || '';
    const name = `${e.tagName.toLowerCase()}.${e.dataset.testid || e.className.baseVal || e.className} ${label}`;
    const text = (e.innerText || '').slice(0, 60).replace(/\\s+/g, ' ');
    if (hides.includes(cs.overflowX) && e.scrollWidth > e.clientWidth + 2)
      found.push(`clips width: ${name} ${e.scrollWidth}>${e.clientWidth} "${text}"`);
    if (hides.includes(cs.overflowY) && e.scrollHeight > e.clientHeight + 2 && e.tagName !== 'svg')
      found.push(`clips height: ${name} ${e.scrollHeight}>${e.clientHeight} "${text}"`);
    if (r.right > right + 1 && !insideScroller(e)) found.push(`sticks out: ${name} right ${Math.round(r.right)} > ${Math.round(right)}`);
  }
  return found;
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`streamlit run app.py` with a tiny local model as the host's model; stopped by its pid."""
    yield from served_tiny_app(tmp_path_factory, "pages", PORTS)


@pytest.fixture(scope="module")
def browser(server):
    yield from launched_chromium()


def open_page(browser, url: str, width: int = 1600, height: int = 1000, ready: str = "h1"):
    """A fresh browser context (no cookies, no session) on `url`, `ready` shown, the script idle."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector(ready, timeout=LOAD_MS)
    settle(page)
    return page


def settle(page, timeout_ms: int = LOAD_MS) -> None:
    page.wait_for_timeout(1000)
    page.wait_for_selector(IDLE, timeout=timeout_ms)
    page.wait_for_timeout(1000)  # charts embed after the script ends


def close(page) -> None:
    page.context.close()


def nav_labels(page) -> list[str]:
    return [t.strip() for t in page.locator("[data-testid=stSidebarNav] a").all_text_contents()]


def run_and_settle(page, button: str) -> None:
    browser_kit.button(page, button).click()
    page.wait_for_timeout(1000)
    page.wait_for_selector(IDLE, timeout=RUN_MS)
    page.wait_for_timeout(1000)


def test_a_link_to_a_page_opens_the_app_as_its_navigation_defines_it(server, browser):
    """First request to this server: the legacy `pages/` folder behaviour would show here."""
    assert not (ROOT / "pages").exists(), "a pages/ folder beside app.py brings back file-name navigation"
    page = open_page(browser, f"{server}/replay?present=1")
    try:
        page.screenshot(path=str(ARTIFACTS / "link-replay.png"))
        assert page.locator("h1").first.inner_text().startswith("Replay")  # "Replay" in presenter mode
        sidebar = page.get_by_test_id("stSidebar")
        assert sidebar.get_attribute("data-collapsed") == "true"  # app.py's presenter setup ran
        labels = nav_labels(page)
        # each link's text is its icon's ligature name, then its title
        assert len(labels) >= len(APP_PAGES) and all(t.endswith(p) for t, p in zip(labels, APP_PAGES)), labels
        assert not {"app", "live", "replay", "sweep"} & set(labels)  # no file names
    finally:
        close(page)


@pytest.mark.parametrize("width, height", [(1280, 720), (1920, 1080)])
def test_presenter_mode_cuts_no_metric(server, browser, width, height):
    page = open_page(browser, f"{server}/replay?present=1", width, height,  # the shipped example
                     ready="[data-testid=stMetric]")
    try:
        assert page.get_by_test_id("stMetric").count() >= 6
        assert page.evaluate(CUT_METRIC_TEXT) == []
        page.goto(f"{server}/?present=1&max_new=24")
        page.get_by_role("button", name="Generate").wait_for(timeout=LOAD_MS)
        settle(page)
        run_and_settle(page, "Generate")
        page.screenshot(path=str(ARTIFACTS / f"present-live-{width}x{height}.png"))
        assert page.get_by_test_id("stMetric").count() >= 6
        assert page.evaluate(CUT_METRIC_TEXT) == []
        for key in ("cached-panel", "recompute-panel", "cache-map-panel"):  # on screen, no scrolling
            box = page.locator(f".st-key-{key}").bounding_box()
            assert box and box["y"] >= 0 and box["y"] + min(box["height"], 200) <= height, (key, box)
        assert page.get_by_test_id("stMetric").first.bounding_box()["y"] < height / 3
    finally:
        close(page)


def grid_image(page) -> str | None:
    """A hash of the pool grid's pixels now (None while it is being replaced)."""
    try:
        drawn = page.get_by_test_id("stVegaLiteChart").first.evaluate(
            "el => { const c = el.querySelector('canvas'); "
            "return c ? c.toDataURL() : (el.querySelector('svg') || {}).outerHTML || null }", timeout=2000)
        return hashlib.sha1(drawn.encode()).hexdigest() if drawn else None
    except Exception:  # the placeholder swapped its element mid-read
        return None


def serving_settings_for_tiny(page) -> None:
    """No shared system prompt and a bigger pool: the tiny tokenizer spends a token per few bytes."""
    open_sidebar(page)
    page.get_by_test_id("stCheckbox").filter(has_text="Shared system prompt").locator("label").click()
    settle(page)
    pool = page.get_by_label("Pool size (blocks)", exact=True)
    pool.fill("64")
    pool.press("Enter")
    settle(page)


def test_serving_grid_changes_while_its_run_is_going(server, browser):
    page = open_page(browser, f"{server}/serving")
    try:
        serving_settings_for_tiny(page)
        page.get_by_role("button", name="Run", exact=True).click()
        page.wait_for_selector(RUNNING, timeout=60_000)
        seen_steps, seen_grids = set(), set()
        deadline = time.monotonic() + RUN_MS / 1000
        while page.locator(RUNNING).count() and time.monotonic() < deadline:
            header = page.get_by_text("blocks held,")
            if header.count():
                seen_steps.add(header.first.inner_text().split("·")[0].strip())
                grid = grid_image(page)
                if grid and page.locator(RUNNING).count():
                    seen_grids.add(grid)
            page.wait_for_timeout(150)
        settle(page, RUN_MS)
        page.screenshot(path=str(ARTIFACTS / "serving-live.png"), full_page=True)
        assert len(seen_steps) >= 3, f"steps seen while running: {sorted(seen_steps)}"
        assert len(seen_grids) >= 2, "the pool grid did not change while the run was going"
        assert page.get_by_test_id("stMetric").count() == 5  # the finished run's figures
        legend = page.get_by_test_id("stVegaLiteChart").first.inner_text()
        assert page.get_by_test_id("stAlertContentError").count() == 0, legend
    finally:
        close(page)


def page_states(server):
    """(name, url, button to press first or None) for every page of the app."""
    return [("live", f"{server}/", "Generate"), ("replay", f"{server}/replay", None),
            ("replay-shrink", f"{server}/replay?replay_source=smollm2-135m-shrink-snapkv", None),
            ("shrink", f"{server}/shrink", "Run full and shrunk"),
            ("sweep", f"{server}/sweep", "Run sweep"), ("serving", f"{server}/serving", "Run"),
            ("planner", f"{server}/planner", None), ("engine", f"{server}/engine", None)]


SIZES = ((1280, 720), (1600, 1000))  # every page is checked at both, after one run


def test_no_element_overflows_its_container(server, browser):
    """Each page runs once at 1280 x 720 and is checked there, then the same page is resized to
    1600 x 1000 and checked again (Streamlit lays the page out anew on a resize: the charts
    re-embed at the new width), so the pages' runs are paid once for both sizes."""
    problems = {}
    for name, url, button in page_states(server):
        page = open_page(browser, url, *SIZES[0])
        try:
            if name == "serving":
                serving_settings_for_tiny(page)
            if button:
                run_and_settle(page, button)
            for width, height in SIZES:
                page.set_viewport_size({"width": width, "height": height})
                page.wait_for_timeout(1500)  # the re-layout and the charts' re-embed
                page.screenshot(path=str(ARTIFACTS / f"page-{name}-{width}.png"), full_page=True)
                assert page.get_by_test_id("stException").count() == 0, name
                found = page.evaluate(CLIPPED_OR_OUT)
                if found:
                    problems[f"{name} at {width}x{height}"] = found[:10]
        finally:
            close(page)
    assert not problems, problems
