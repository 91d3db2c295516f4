"""End to end in a real browser: `streamlit run app.py` driven by Chromium through playwright.

On the embedded default model (SmolLM2-135M): Generate streams text in visible increments, every
live chart draws data marks, the no-cache panel reports the same tokens, and Stop ends a run and
keeps what it produced. Screenshots land in test-artifacts/ (live.png: the viewport mid-generation;
live-tall.png: the same moment, taller; live-final.png: the whole page after the run; stopped.png).
live-tall.png becomes the README's docs/screenshot.png when that file is missing or when
KVVIZ_UPDATE_SCREENSHOT=1 (so an ordinary `make test` leaves the committed image alone; take it
on a quiet machine, since the headline figures in it are live timings).

Uses Debian's /usr/bin/chromium (`playwright install` cannot download browsers here). Without it
the tests skip, except under CI (env CI set), where they fail. Timings on a shared 2-core machine
are noisy: waits are generous and no speed is asserted.
"""
from __future__ import annotations

from kvviz.core import assets
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from browser_kit import ARTIFACTS, ROOT, button

from bench.app_server import IDLE, RUNNING

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DOCS_SHOT = ROOT / "docs" / "screenshot.png"
VIEWPORT = {"width": 1600, "height": 1200}
TALL_VIEWPORT = {"width": 1600, "height": 1800}  # the README shot: text panels and first charts
CACHED_TEXT = ".st-key-cached-panel [data-testid='stCode']"
LOAD_MS = 300_000  # first use converts the default model (~40 s alone; far more on a busy box)
RUN_MS = 600_000  # a whole run with the race, on a shared CPU, with the browser on it too
DATA_MARKS = ("mark-rect", "mark-line", "mark-symbol", "mark-area")
COUNT_DATA_MARKS = """(el, kinds) => {
  let n = 0;
  el.querySelectorAll('g.role-mark').forEach(g => {
    if (kinds.some(k => g.classList.contains(k))) n += g.childElementCount;
  });
  return n;
}"""


@pytest.fixture(scope="module")
def server(default_app):
    """The session's server on the default model (tests/browser/conftest.py)."""
    return default_app


@pytest.fixture(scope="module")
def browser_context(server, chromium):
    """One context of the session's Chromium for the module; each test opens its own page (its own
    Streamlit session)."""
    context = chromium.new_context(viewport=VIEWPORT)
    try:
        yield context
    finally:
        context.close()


@pytest.fixture
def page(server, browser_context):
    """A fresh browser session on the live page, the model loaded and the script idle."""
    from playwright.sync_api import expect

    page = browser_context.new_page()
    try:
        # fp32 everywhere: in bf16 (the CUDA default) the two modes may rightly flip a near-tie.
        page.goto(f"{server}/?dtype=float32")
        expect(button(page, "Generate")).to_be_enabled(timeout=LOAD_MS)
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
        yield page
    finally:
        page.close()


def cached_text(page) -> str | None:
    """The cached panel's text now, or None while it is absent or being replaced."""
    try:
        code = page.locator(CACHED_TEXT)
        return code.inner_text(timeout=500).strip() if code.count() else None
    except Exception:  # the placeholder swapped its element between count and read
        return None


def is_running(page) -> bool:
    return page.locator(RUNNING).count() > 0


def watch_growth(page, until, timeout_s: float = RUN_MS / 1000, on_increment=None) -> list[str]:
    """Poll the cached text every ~100 ms; return each longer text seen, in order.

    Stops when `until(increments)` is true or the script is idle again after having run.
    """
    increments: list[str] = []
    started = time.monotonic()
    seen_running = False
    while time.monotonic() - started < timeout_s:
        running = is_running(page)
        seen_running = seen_running or running
        text = cached_text(page)
        if text and (not increments or len(text) > len(increments[-1])):
            increments.append(text)
            if on_increment is not None and running:
                on_increment(increments)
        if until(increments) or (seen_running and not running and time.monotonic() - started > 2):
            return increments
        time.sleep(0.1)
    return increments


def shoot(page, name: str) -> Path:
    """A viewport screenshot, plus a taller one for the README, both of this very moment."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    page.set_viewport_size(TALL_VIEWPORT)
    page.wait_for_timeout(300)
    page.screenshot(path=str(ARTIFACTS / f"{name}-tall.png"))
    page.set_viewport_size(VIEWPORT)
    return path


def shoot_whole_page(page, name: str) -> None:
    """The whole page: Streamlit scrolls an inner element, so grow the viewport to fit it."""
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]')?.scrollHeight"
                           " || document.body.scrollHeight")
    page.set_viewport_size({"width": VIEWPORT["width"], "height": min(max(int(height), 1200), 4000)})
    page.wait_for_timeout(500)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
    page.set_viewport_size(VIEWPORT)


def test_generate_streams_text_charts_and_the_same_tokens(page):
    from playwright.sync_api import expect

    mid_shots: list[int] = []

    def capture(increments):  # mid-generation: after 3 increments, and again later if still going
        if len(increments) in (3, 12):
            shoot(page, "live")
            if is_running(page):
                mid_shots.append(len(increments))

    button(page, "Generate").click()
    page.wait_for_selector(RUNNING, timeout=60_000)
    increments = watch_growth(page, until=lambda inc: False, on_increment=capture)
    page.wait_for_selector(IDLE, timeout=RUN_MS)
    final = cached_text(page)
    shoot_whole_page(page, "live-final")

    assert len(increments) >= 3, f"the cached text grew in only {len(increments)} visible steps"
    assert final and all(final.startswith(text) for text in increments), "the text was not a growing prefix"
    assert mid_shots, "no screenshot was taken while generating"
    if not DOCS_SHOT.exists() or os.environ.get("KVVIZ_UPDATE_SCREENSHOT") == "1":
        DOCS_SHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(ARTIFACTS / "live-tall.png", DOCS_SHOT)

    charts = page.locator("[data-testid=stVegaLiteChart]:not(.st-key-chart-preload *)")  # not the hidden preload
    assert charts.count() >= 6
    for i in range(charts.count()):
        chart = charts.nth(i)
        expect(chart.locator("svg, canvas").first).to_be_visible()
        box = chart.bounding_box()
        assert box and box["width"] > 50 and box["height"] > 20
        if chart.locator("svg").count():
            assert chart.evaluate(COUNT_DATA_MARKS, list(DATA_MARKS)) > 0, f"chart {i} draws no data"
    expect(page.get_by_text("Same tokens").first).to_be_visible()
    expect(page.get_by_text("· float32 ·").first).to_be_visible()  # the model line: fp32 as asked
    assert page.get_by_test_id("stException").count() == 0
    assert page.get_by_test_id("stAlertContentError").count() == 0


def test_stop_ends_the_run_and_keeps_the_text(page):
    from playwright.sync_api import expect

    slider = page.get_by_role("slider", name="Max new tokens")
    slider.focus()
    page.keyboard.press("End")  # 512: far more than will be produced before Stop
    expect(page.get_by_test_id("stSlider").filter(has_text="Max new tokens")
           .get_by_test_id("stSliderThumbValue")).to_have_text("512")
    page.wait_for_timeout(500)
    page.wait_for_selector(IDLE, timeout=60_000)

    button(page, "Generate").click()
    page.wait_for_selector(RUNNING, timeout=60_000)
    increments = watch_growth(page, until=lambda inc: len(inc) >= 3)
    assert len(increments) >= 3 and is_running(page), "the run ended before Stop could be pressed"
    before = increments[-1]
    page.locator(".st-key-stop button").click()

    expect(page.get_by_text("Stopped.")).to_be_visible(timeout=120_000)
    page.wait_for_selector(IDLE, timeout=120_000)
    first = cached_text(page)
    page.wait_for_timeout(1500)
    second = cached_text(page)
    page.screenshot(path=str(ARTIFACTS / "stopped.png"))
    assert first == second, "the text kept growing after Stop"
    assert first and first.startswith(before), "the text produced before Stop was not kept"
    assert tokens_made(page) < 512


TOKENS_CARD = re.compile(r"^(\d[\d,]*) × \d+$")  # "N × batch"


def tokens_made(page) -> int:
    """The Tokens card's N, once it shows a number (the page's first figure card is the hidden
    chart preload's "–", and a card reads "–" until its figure comes)."""
    from playwright.sync_api import expect

    label = page.get_by_test_id("stMetricLabel").get_by_text("Tokens", exact=True)
    # the shown card: the figures row keeps a hidden copy ("9999 × 64") that holds its height
    value = page.locator("[data-testid=stMetric]:visible").filter(has=label).get_by_test_id("stMetricValue")
    expect(value).to_have_text(TOKENS_CARD, timeout=30_000)
    return int(TOKENS_CARD.match(value.inner_text().strip())[1].replace(",", ""))


@pytest.mark.long("two sessions generate in turn on one device, each run complete")
def test_two_sessions_take_turns_and_see_only_their_own(server, browser_context):
    """Two browser sessions click Generate together: one waits in line, both finish, apart."""
    from urllib.parse import quote

    from playwright.sync_api import expect

    pages = []
    # 64 tokens first: that run must still hold the device when the second session's script
    # reaches the queue, also on a loaded CI machine (24 tokens could finish first there); the
    # second run's length proves nothing more past a few tokens (64 of them on its long prompt,
    # the no-cache side recomputing it each step: 15 of the test's 41 s)
    for preset, max_new in (("Short question", 64), ("Chat with a long system prompt", 8)):
        page = browser_context.new_page()
        page.goto(f"{server}/?dtype=float32&max_new={max_new}&preset={quote(preset)}")
        pages.append(page)
    for page in pages:  # both load at once
        expect(button(page, "Generate")).to_be_enabled(timeout=LOAD_MS)
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
    try:
        for page in pages:
            button(page, "Generate").click()
        waited, deadline = False, time.monotonic() + RUN_MS / 1000
        while time.monotonic() < deadline:
            waited = waited or any(p.get_by_text("in line").count() for p in pages)
            if not any(is_running(p) for p in pages) and all(cached_text(p) for p in pages):
                break
            time.sleep(0.1)
        assert waited, "the second session never said it was waiting for the device"
        for page in pages:
            expect(page.get_by_text("Same tokens:")).to_be_visible(timeout=RUN_MS)
            assert page.locator("[data-testid='stAlertContentError']").count() == 0
        first, second = (cached_text(p) for p in pages)
        assert first and second and first != second
        labels = [p.locator("[data-testid='stExpander'] summary").filter(has_text="Prompt:").inner_text()
                  for p in pages]
        assert labels[0] != labels[1]  # each session shows its own prompt's token count
    finally:
        for page in pages:
            page.close()


# --- Shrink the cache, live and replayed ---------------------------------------------------------

ANSWERS = "[data-testid=stMain] [data-testid=stCode]"


def answers(page) -> list[str]:
    """The two answer boxes' texts now (full, shrunk); [] while they are being replaced."""
    try:
        boxes = page.locator(ANSWERS)
        return [boxes.nth(i).inner_text(timeout=500).strip() for i in range(boxes.count())]
    except Exception:  # a slot swapped its element between count and read
        return []


def both(shown: list[str]) -> bool:
    return len(shown) == 2 and all(shown)


def settled_answers(page, done=both, timeout_s: float = 60) -> list[str]:
    """The answer boxes' texts once `done(texts)`, or the last read when `timeout_s` ends. One read
    is not enough on a loaded machine: a read that times out or meets a slot being replaced
    gives [] (the fresh-clone suite of 2026-12-07 failed on such a read, the page fine)."""
    shown, deadline = answers(page), time.monotonic() + timeout_s
    while not done(shown) and time.monotonic() < deadline:
        time.sleep(0.2)
        shown = answers(page)
    return shown


def test_shrink_page_fills_both_answers_as_the_runs_take_turns(server, browser_context):
    from playwright.sync_api import expect

    page = browser_context.new_page()
    try:
        page.goto(f"{server}/shrink")
        expect(page.get_by_role("button", name="Run full and shrunk")).to_be_enabled(timeout=LOAD_MS)
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
        page.get_by_role("button", name="Run full and shrunk").click()
        page.wait_for_selector(RUNNING, timeout=60_000)
        seen = []  # (full, shrunk) pairs shown while the runs were going
        deadline = time.monotonic() + RUN_MS / 1000
        while is_running(page) and time.monotonic() < deadline:
            now = answers(page)
            if len(now) == 2 and all(now) and (not seen or tuple(now) != seen[-1]):
                seen.append(tuple(now))
            time.sleep(0.1)
        page.wait_for_selector(IDLE, timeout=RUN_MS)
        page.wait_for_timeout(1000)
        shoot_whole_page(page, "shrink-final")
        final = settled_answers(page)
        assert len(seen) >= 2, f"both answers were shown in only {len(seen)} states while running"
        assert both(final), final
        def plain(text: str) -> str:  # the finished answers mark the first difference ⟦ ⟧
            return text.replace("⟦", "").replace("⟧", "")
        for full, shrunk in seen:  # each state is a beginning of the answer that came out
            assert plain(final[0]).startswith(plain(full)) and plain(final[1]).startswith(plain(shrunk)), (full, shrunk, final)
        heading = page.locator("[data-testid=stMain] h3").first.inner_text()
        assert heading.startswith("identical") or heading.startswith("diverged at token")
        assert page.get_by_test_id("stVegaLiteChart").count() == 3  # bytes, step time, the kept map
        assert page.get_by_test_id("stDownloadButton").count() == 2
        assert page.get_by_test_id("stException").count() == 0
        assert page.get_by_test_id("stAlertContentError").count() == 0
    finally:
        page.close()


def test_shrink_page_runs_a_quantized_cache(server, browser_context):
    from playwright.sync_api import expect

    page = browser_context.new_page()
    try:
        page.goto(f"{server}/shrink")
        expect(page.get_by_role("button", name="Run full and shrunk")).to_be_enabled(timeout=LOAD_MS)
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
        page.get_by_test_id("stSidebar").get_by_text("Quantized cache", exact=True).click()
        page.wait_for_timeout(1000)
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
        expect(page.get_by_text("Backend", exact=True)).to_be_visible(timeout=30_000)
        page.get_by_role("button", name="Run full and shrunk").click()
        page.wait_for_selector(RUNNING, timeout=60_000)
        page.wait_for_selector(IDLE, timeout=RUN_MS)
        page.wait_for_timeout(1000)
        shoot_whole_page(page, "shrink-quantized")
        final = settled_answers(page)
        assert both(final), final
        expect(page.get_by_text("Quantized cache: payload").first).to_be_visible()
        heading = page.locator("[data-testid=stMain] h3").first.inner_text()
        assert heading.startswith("identical") or heading.startswith("diverged at token")
        assert "quantized cache" in heading or heading.startswith("identical")
        assert page.get_by_test_id("stVegaLiteChart").count() == 2  # nothing evicted: no kept map
        assert page.get_by_test_id("stException").count() == 0
        assert page.get_by_test_id("stAlertContentError").count() == 0
    finally:
        page.close()


def test_replay_plays_the_shipped_shrink_comparison(server, browser_context):
    from kvviz.shrink import trace

    path = assets.TRACES / "smollm2-135m-shrink-snapkv.json"
    rec = trace.from_json(path.read_bytes())
    page = browser_context.new_page()
    try:
        page.goto(f"{server}/replay?replay_source={path.stem}")
        page.wait_for_selector("[data-testid=stMain] h3", timeout=LOAD_MS)
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
        expected = [rec.result.full.text.strip(), rec.result.shrunk.text.strip()]
        assert settled_answers(page, expected.__eq__) == expected  # both boxes (under CI's load one came 1 s after idle)
        assert page.locator("[data-testid=stMain] h3").first.inner_text() == rec.result.caption()
        button(page, "Play").click()
        page.wait_for_selector(RUNNING, timeout=60_000)
        seen, deadline = set(), time.monotonic() + RUN_MS / 1000
        while is_running(page) and time.monotonic() < deadline:
            now = answers(page)
            if len(now) == 2:
                seen.add(now[1])
            time.sleep(0.05)
        page.wait_for_selector(IDLE, timeout=RUN_MS)
        assert len(seen) >= 3, "the replay did not show the answers growing"
        assert settled_answers(page, expected.__eq__) == expected
        assert page.get_by_test_id("stVegaLiteChart").count() == 3
        assert page.get_by_test_id("stException").count() == 0
    finally:
        page.close()
