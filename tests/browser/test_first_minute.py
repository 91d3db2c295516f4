"""The first minute, in a real browser: a hosted kvviz (KVVIZ_HOSTED=1, its "default" model the tiny
random Llama placed where the converted default lives) served by `streamlit run app.py`, driven
by Debian's Chromium the way a stranger meets it (issue 27).

* the first visitor of the fresh server reads a loading line before anything else;
* a cold load at 1280 x 720, 1920 x 1080 and 390 x 844 (a phone: touch, mobile) shows the one
  sentence of what this is, Generate and the prompt it will use inside the first viewport, the
  sidebar closed and the explainer folded below Generate (screenshots hosted-cold-*.png);
* in hosted mode the navigation has no "vLLM engine" page (no server is listed);
* on the phone, after a run, a tap on a cache-map column writes its token on the map;
* on the session's hosted server: on a phone no tour step is cut and the box keeps its height; a
  link to /engine (not offered: no vLLM server listed) gets a sentence, never Streamlit's "Page not
  found".

What is on the first screen after a hosted run (both texts, the map's first row) is read by
tests/browser/test_readable.py in the same visit that reads the page's charts.

Every wait is bounded; the server is stopped by its pid and the browser closed whatever happens.
Without Chromium the module skips, except under CI (env CI set), where it fails.
"""
from __future__ import annotations

import re
import time

import pytest
from browser_kit import ARTIFACTS, button, served_hosted_tiny

from bench.app_server import IDLE, RUNNING

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PORTS = range(9101, 9111)
LOAD_MS = 180_000
RUN_MS = 180_000
SIZES = [(1280, 720), (1920, 1080), (390, 844)]
PHONE = {"has_touch": True, "is_mobile": True}
FIRST_TEXT = "() => (document.querySelector('[data-testid=stMain]') || {}).innerText || ''"
PICKED = """el => [...el.querySelectorAll('g.role-mark.mark-text text')].map(t => t.textContent)
    .filter(t => t.startsWith('position'))"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    for served in served_hosted_tiny(tmp_path_factory, "first-minute", PORTS):
        yield served.url


@pytest.fixture(scope="module")
def browser(server, chromium):
    """The session's Chromium (one playwright per process: a second one refuses to start)."""
    yield chromium


def visit(browser, url: str, width: int, height: int):
    """A fresh context (nothing cached: a cold load) at this size; a phone when narrow."""
    context = browser.new_context(viewport={"width": width, "height": height}, **(PHONE if width < 800 else {}))
    page = context.new_page()
    page.goto(url, timeout=LOAD_MS)
    return page


def ready(page) -> None:
    button(page, "Generate").wait_for(timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    page.wait_for_timeout(1000)  # late layout (fonts, the chart preload) settles


CUT_BUTTONS = """() => [...document.querySelectorAll('[data-testid=stMain] button [data-testid=stMarkdownContainer],'
    + '[data-testid=stMain] button [data-testid=stMarkdownContainer] *')]
    .filter(e => e.checkVisibility() && e.scrollWidth > e.clientWidth)
    .map(e => `${e.closest('button').innerText.split('\\n')[0]} (${e.scrollWidth} > ${e.clientWidth} px)`)"""


def cut_buttons(page) -> list[str]:
    """The page's buttons whose label is cut short (an ellipsis: a room reads "Gener…")."""
    return page.evaluate(CUT_BUTTONS)


def top(page, selector: str) -> float:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, selector
    return box["y"]


def test_the_first_visitor_reads_a_loading_line_first(server, browser):
    """Runs first (module order): the server has not yet imported torch and transformers."""
    page = visit(browser, server, 1280, 720)
    try:
        page.wait_for_function(FIRST_TEXT, timeout=LOAD_MS, polling=50)
        first = page.evaluate(FIRST_TEXT)
        ready(page)
        assert first.startswith("Loading kvviz"), first
    finally:
        page.context.close()


@pytest.mark.parametrize("width, height", SIZES)
def test_a_cold_hosted_load_shows_what_this_is_and_generate_on_the_first_screen(server, browser, width, height):
    page = visit(browser, server, width, height)
    try:
        ready(page)
        page.screenshot(path=str(ARTIFACTS / f"hosted-cold-{width}x{height}.png"))
        generate = button(page, "Generate").bounding_box()
        prompt = page.get_by_test_id("stText").filter(has_text="Prompt:").first.bounding_box()
        intro = page.get_by_text("writes the same answer twice").bounding_box()
        print(f"{width}x{height}: Generate at y={generate['y']:.0f}, prompt at y={prompt['y']:.0f}")
        assert generate["y"] + generate["height"] <= height, generate
        assert prompt["y"] + prompt["height"] <= height, prompt
        assert intro["y"] + intro["height"] <= generate["y"]
        assert cut_buttons(page) == []
        assert page.get_by_test_id("stSidebar").get_attribute("data-collapsed") == "true"
        explainer = page.get_by_test_id("stExpander").filter(has_text="What am I looking at?")
        assert explainer.count() == 1 and top(page, "[data-testid=stExpander]") > generate["y"]
        assert not page.get_by_text("prefill", exact=False).first.is_visible()  # the glossary is folded
        nav = page.get_by_test_id("stSidebarNav")
        assert nav.get_by_text("Replay", exact=True).count() == 1 and nav.get_by_text("vLLM engine", exact=True).count() == 0
    finally:
        page.context.close()


def run_once(page) -> None:
    button(page, "Generate").click()
    page.wait_for_selector(RUNNING, timeout=60_000)
    page.wait_for_selector(IDLE, timeout=RUN_MS)
    page.wait_for_timeout(1500)


def test_a_tap_on_a_map_column_shows_its_token_on_a_phone(server, browser):
    page = visit(browser, f"{server}/?max_new=16&race=false", 390, 844)
    try:
        ready(page)
        run_once(page)
        chart = page.locator(".st-key-cache-map-panel [data-testid='stVegaLiteChart']").first
        chart.scroll_into_view_if_needed()
        assert chart.evaluate(PICKED) == []  # nothing picked yet
        column = chart.locator("svg g.mark-rect.role-mark").last.locator("path").last  # the newest column
        box = column.bounding_box()
        page.touchscreen.tap(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        deadline = time.monotonic() + 10
        while not chart.evaluate(PICKED) and time.monotonic() < deadline:
            page.wait_for_timeout(200)
        page.screenshot(path=str(ARTIFACTS / "hosted-phone-tap.png"))
        picked = chart.evaluate(PICKED)
        assert picked and picked[0].startswith("position "), picked
        assert page.get_by_test_id("stException").count() == 0
    finally:
        page.context.close()


def wall_clock_figure(page) -> str:
    """The wall-clock rate as the line of figures above the texts shows it ("–" when unmeasured)."""
    line = page.locator(".st-key-headline-line").inner_text(timeout=10_000)
    return line.split("Tokens/s (wall clock)")[1].split("·")[0].strip()


# The line of figures shows a wall-clock rate (a number, not "–": two tokens have arrived).
WALL_CLOCK_MEASURED = """() => {
  const line = (document.querySelector('.st-key-headline-line') || {}).innerText || '';
  return /^\\s*[0-9]/.test(line.split('Tokens/s (wall clock)')[1] || '');
}"""


def test_stop_keeps_the_wall_clock_rate_measured_so_far(server, browser):
    slow = "Slow motion ×10"
    page = visit(browser, f"{server}/?max_new=128&race=false&pace={slow.replace(' ', '%20')}", 1280, 720)
    try:
        ready(page)
        button(page, "Generate").click()
        page.wait_for_selector(RUNNING, timeout=60_000)
        page.wait_for_function(WALL_CLOCK_MEASURED, timeout=120_000, polling=100)  # two tokens have come
        assert page.locator(RUNNING).count(), "the run ended before Stop could be pressed"
        page.locator(".st-key-stop button").click()
        page.get_by_text("Stopped.").wait_for(timeout=RUN_MS)
        page.wait_for_selector(IDLE, timeout=RUN_MS)
        rate = wall_clock_figure(page)
        assert rate != "–" and float(rate) > 0, rate
    finally:
        page.context.close()


@pytest.fixture(scope="module")
def plain_server(tiny_app):
    """The session's tiny server, not hosted (tests/browser/conftest.py)."""
    return tiny_app


@pytest.mark.parametrize("width, height, closed", [(390, 844, "true"), (1280, 720, "false")])
def test_on_your_own_machine_the_sidebar_is_closed_only_on_a_narrow_screen(plain_server, browser, width,
                                                                         height, closed):
    page = visit(browser, plain_server, width, height)
    try:
        ready(page)
        assert page.get_by_test_id("stSidebar").get_attribute("data-collapsed") == closed
        assert cut_buttons(page) == []  # the sidebar open at 1280 cut Generate to "Gener…" (53 > 49 px)
        generate = button(page, "Generate").bounding_box()
        assert generate["y"] + generate["height"] <= height, generate
        assert page.get_by_test_id("stSidebarNav").get_by_text("vLLM engine", exact=True).count() == 1
    finally:
        page.context.close()


def test_no_tour_step_is_cut_on_a_phone(hosted_app, chromium):
    """Issue 37: a fixed 168 px box cut step 3 before its ratio on a 390 x 844 phone."""
    page = visit(chromium, f"{hosted_app}/?max_new=16", 390, 844)
    try:
        ready(page)
        run_once(page)
        box = page.locator(".st-key-tour-box")
        heights = set()
        for step in range(1, 6):
            box.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / f"phone-tour-step-{step}.png"))
            fit = box.evaluate("""b => { const s = b.querySelector('.st-key-tour-step'); const r = b.getBoundingClientRect();
                return {scroll: b.scrollHeight, client: b.clientHeight, inside: s.getBoundingClientRect().bottom <= r.bottom + 1,
                        text: s.innerText}; }""")
            assert fit["scroll"] <= fit["client"] + 1 and fit["inside"], (step, fit)
            assert f"{step} · " in fit["text"], fit["text"]
            heights.add(round(box.bounding_box()["height"]))
            if step < 5:
                page.get_by_role("button", name=re.compile("^Next step")).click()
                page.wait_for_function(f"() => document.querySelector('.st-key-tour-step').innerText.includes('{step + 1} · ')",
                                       timeout=30_000)
                page.wait_for_selector(IDLE, timeout=30_000)
        assert len(heights) == 1, heights  # the box keeps its height from step to step
    finally:
        page.context.close()


def test_a_hosted_link_to_the_engine_page_gets_a_sentence_not_page_not_found(hosted_app, chromium):
    page = visit(chromium, f"{hosted_app}/engine", 1280, 720)
    try:
        page.get_by_text("Watching vLLM servers is off").wait_for(timeout=LOAD_MS)
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
        page.wait_for_timeout(1000)
        assert page.get_by_text("Page not found").count() == 0 and page.get_by_role("dialog").count() == 0
        nav = page.get_by_test_id("stSidebarNav")
        assert nav.get_by_text("vLLM engine", exact=True).count() == 0  # still not in the menu
        assert page.get_by_role("link", name=re.compile("Open Live")).count() == 1
    finally:
        page.context.close()
