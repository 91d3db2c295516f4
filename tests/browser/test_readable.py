"""Every chart on every page, read as a person reads it (issue 37), in a real browser.

Each page is visited once per mode (normal: the `tiny_app` server; hosted: `hosted_app`;
presenter: `tiny_app` with `?present=1`), after a real run of the tiny model where the page has
one. The page is then looked at in each size without running again: 1280 x 720, then 1920 x 1080
(the window resized: Streamlit lays the page out anew, the charts at the new width), then a
390 x 844 phone (touch and mobile emulation switched on in the same tab). Presenter mode is
looked at in the two screen sizes, and on a phone opened as a phone (the Live page and its run;
see STAGE_SIZES). At each size:

* every chart is readable (tests/browser/geometry.py reads the drawn SVG): its plot has room, its
  bars are not hairlines, no two of its texts print over each other, no axis or legend text lies
  over the plot, no text is cut by the chart's edge or cut short, every series drawn has a legend
  entry in view and no line hides another without a word saying so;
* no element of the page hides part of its content or sticks out of the page (the scan
  tests/browser/test_pages.py ran at 1280 and 1600 px wide before this harness took it over).

The same visits read the first screen (STAGE): after a hosted run at 1280 x 720 the written text's
first line and the cache map's first row are on it, and each story box's title at 1920 x 1080 too
(tests/browser/test_first_minute.py ran its own runs for this before); on stage (presenter mode,
Live after a run and Replay) no figure card is cut and the story starts on the first screen (before:
tests/browser/test_pages.py and test_links.py, a run or a load per size).

Cost: one page load and one run per visit. A visit's tab is opened while the one before is looked
at (its load overlaps), waits end when the page has held still for browser_kit.STILL_MS rather than after fixed
pauses, and each visit prints where its time went (`-s`).

Screenshots of every page at every size land in test-artifacts/readable-<mode>-<page>-<size>.png,
and each chart found unreadable alone in ...-chart<n>.png. Defects found and not fixed here are
strict xfails (KNOWN). Without Chromium the module skips, except under CI (env CI set), where it
fails.
"""
from __future__ import annotations

import base64
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from urllib.parse import quote

import pytest
import browser_kit
from browser_kit import ARTIFACTS

from tests.browser import geometry

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOAD_MS = 240_000  # a page's first script run on a loaded machine (imports, the tiny model)
RUN_MS = 300_000
SIZES = ((1280, 720), (1920, 1080), (390, 844))  # the last one a phone: touch, mobile
PHONE = SIZES[2]
MODES = ("normal", "hosted", "presenter")
# Presenter mode enlarges chart text for a projector, except on a phone-wide window
# (kvviz.viz.charts.with_font_scale): a choice made when the chart is drawn, which a window resized
# to a phone's width does not redraw. So presenter mode is looked at in the two desktop sizes after
# a resize, and on a phone opened as a phone ("presenter-phone": the Live page, its run).
STAGE_SIZES = SIZES[:2]
SHRINK_PROMPT = "Ada kept the light. Who kept the light?"  # the default prompt is past the tiny model's context


def replayed_examples() -> list[tuple[str, tuple[str, ...]]]:
    """(shipped example, the modes Replay is looked at with it in): the Live page's run and every
    vLLM watch (its own panels) in every mode; a shrink comparison (its charts are the Shrink
    page's, looked at after its run there in every mode) in normal mode, for its page's layout."""
    from kvviz.core import assets
    from kvviz.vllm.trace import FORMAT, peek_format
    paths = sorted(assets.TRACES.glob("*.json"))
    live = [(p.stem, MODES) for p in paths if p.stem == "smollm2-135m-cpu-fp32"]
    shrink = [(p.stem, ("normal",)) for p in paths if "shrink" in p.stem][:1]
    return live + shrink + [(p.stem, MODES) for p in paths if peek_format(p.read_bytes()) == FORMAT]


FITTED = """() => { window.kvvizFitted = [...document.querySelectorAll('[data-testid=stVegaLiteChart]')].map(el => {
  const svg = el.querySelector('svg.marks'), w = el.getBoundingClientRect().width;
  return !svg || w < 20 || Math.abs(svg.getBoundingClientRect().width - w) <= 2;
}); }"""  # which charts are as wide as their boxes now, before the window changes



def settle(page, timeout_ms: int = LOAD_MS, fit: bool = False) -> None:
    browser_kit.steady(page, timeout_ms, fit)


def press(page, key: str) -> None:
    """Press the button of this widget key and wait for the run it starts to end."""
    browser_kit.run_and_hold_still(page, page.locator(f".st-key-{key} button"), RUN_MS)


def run_shrink(page) -> None:
    press(page, "shrink_run")
    press(page, "shrink_sweep_shipped")


@dataclass(frozen=True)
class Visit:
    """A page in one state: where it is and what a visitor does there before looking."""
    name: str
    path: str  # with its query, if any
    act: Callable | None = None  # page -> None: the run(s) before looking
    modes: tuple[str, ...] = MODES  # looked at in these modes


VISITS = (
    Visit("live", "/?max_new=16", partial(press, key="generate")),
    *(Visit(f"replay-{name}", f"/replay?replay_source={name}", modes=modes) for name, modes in replayed_examples()),
    Visit("shrink", f"/shrink?shrink_new=8&shrink_prompt={quote(SHRINK_PROMPT)}", run_shrink),
    Visit("sweep", "/sweep?sweep_new=4", partial(press, key="sweep_run")),  # its default grid, 4 new tokens a point
    # no shared system prompt and a bigger pool (the tiny tokenizer spends a token per few bytes), no
    # slow motion (the pauses change no chart), 8 new tokens a request
    Visit("serving", "/serving?srv_share=false&srv_blocks=64&srv_delay=0&srv_max_new=8", partial(press, key="srv_run")),
    Visit("planner", "/planner"),
    Visit("engine", "/engine"),  # no vLLM server: its page says so, and draws no chart
)
NOT_HOSTED = {"engine"}  # hosted with no vLLM server listed: no engine page


@dataclass
class Seen:
    """What one visit showed: per size, the charts' problems and the page's overflows."""
    charts: dict[str, list[str]] = field(default_factory=dict)  # "1280x720" -> problems
    overflows: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # "1280x720" -> charts drawn
    before_run: dict = field(default_factory=dict)  # what the page said before its run (hosted live)
    stage: dict[str, dict] = field(default_factory=dict)  # "1280x720" -> the first screen's facts (STAGE)
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # where the visit's time went, s

    def lap(self, phase: str) -> None:
        """Charge the time since the last lap to `phase`."""
        now = time.monotonic()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - getattr(self, "_last", now)
        self._last = now


# What is on the first screen, the page at its top (viewport pixels): the bottom of the first line of
# the text written with the cache and of the cache map's first row of cells (layer 0), the story
# boxes' tops and heights, the figure cards' tops and any card text cut short, and the Play button.
FIRST_SCREEN = r"""(stories) => {
  const code = document.querySelector('.st-key-cached-panel [data-testid=stCode] code');
  let node = code, line = null;
  while (node && node.nodeType !== Node.TEXT_NODE) node = node.firstChild;
  if (node) { const r = document.createRange(); r.setStart(node, 0); r.setEnd(node, 1); line = r.getBoundingClientRect().bottom; }
  const rows = [...document.querySelectorAll('.st-key-cache-map-panel [data-testid=stVegaLiteChart] path[aria-label]')]
    .filter(p => /(^|; )layer: 0;/.test(p.getAttribute('aria-label'))).map(p => p.getBoundingClientRect());
  const boxes = Object.fromEntries(stories.map(k => {
    const e = document.querySelector('.st-key-' + k);
    const b = e && e.getBoundingClientRect();
    return [k, b ? {y: b.y, h: b.height} : null];
  }));
  const shown = e => e.checkVisibility({visibilityProperty: true, opacityProperty: true});  // not a
  // hidden copy that holds the row's height, nor the chart preload's card
  const cards = [...document.querySelectorAll('[data-testid=stMetric]')].filter(shown);
  const cut = [...document.querySelectorAll(
      '[data-testid=stMetric] [data-testid=stMetricLabel], [data-testid=stMetric] [data-testid=stMetricValue],'
      + '[data-testid=stMetric] .stMarkdownEllipsis, [data-testid=stMetric] p')]
    .filter(e => shown(e) && e.scrollWidth > e.clientWidth + 1)
    .map(e => `${e.innerText} (${e.scrollWidth} > ${e.clientWidth} px)`);
  const play = document.querySelector('.st-key-replay_play button');
  const explainer = [...document.querySelectorAll('[data-testid=stExpander]')]
    .find(e => e.innerText.includes('What am I looking at?'));
  return {line, row: rows.length ? Math.max(...rows.map(r => r.bottom)) : null, rows: rows.length, boxes,
          cards: cards.length, first_card: cards.length ? cards[0].getBoundingClientRect().y : null, cut,
          play: play ? play.getBoundingClientRect().y : null,
          explainer: explainer ? explainer.getBoundingClientRect().y : null,
          text: document.querySelector('[data-testid=stMain]').innerText};
}"""
STORY = ("cached-panel", "recompute-panel", "cache-map-panel")  # the run's story: both texts, the map
# (visit, mode) -> the sizes whose first screen is read (FIRST_SCREEN) and asserted below
STAGE = {("live", "hosted"): SIZES[:2], ("live", "presenter"): STAGE_SIZES,
         ("replay-smollm2-135m-cpu-fp32", "presenter"): STAGE_SIZES}


def resize(page, cdp, width: int, height: int) -> None:
    """The window at this size. A phone gets touch and mobile emulation through the DevTools
    protocol, in the same tab (the run stays on the page). Waits for the charts to re-embed at the
    new width."""
    if (width, height) == (page.viewport_size["width"], page.viewport_size["height"]):
        return  # opened at this size (a phone context: a phone already)
    page.evaluate(FITTED)
    if width < 800:
        cdp.send("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 5})
        cdp.send("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": True})
    else:
        page.set_viewport_size({"width": width, "height": height})
    settle(page, 30_000, fit=True)  # a chart that never fits its box is reported by the checks


def photograph(cdp, path: Path, clip: dict | None = None) -> None:
    """The screen as it is now (or the `clip` of it, in the document's pixels), through the DevTools
    protocol: playwright's own screenshot would first undo a phone's emulation. PNG encoded for
    speed, not size."""
    params = {"format": "png", "optimizeForSpeed": True, **({"clip": {**clip, "scale": 1}} if clip else {})}
    path.write_bytes(base64.b64decode(cdp.send("Page.captureScreenshot", params)["data"]))


CHART_IN_VIEW = """index => {
  const el = document.querySelectorAll('[data-testid=stVegaLiteChart]')[index];
  el.scrollIntoView({block: 'center'});
  const r = el.getBoundingClientRect();
  return {x: Math.max(0, r.x) + scrollX, y: Math.max(0, r.y) + scrollY,  // in the document's pixels
          width: Math.min(r.width, innerWidth), height: Math.min(r.height, innerHeight)};
}"""


def photograph_charts(page, cdp, name: str, charts: dict[int, str]) -> None:
    """Each of these charts (its place among the page's charts -> what to call it) alone:
    test-artifacts/readable-<mode>-<page>-<size>-<what>.png. Leaves the page at its top."""
    for index, what in charts.items():
        photograph(cdp, ARTIFACTS / f"readable-{name}-{what}.png", page.evaluate(CHART_IN_VIEW, index))
    if charts:
        page.evaluate(TO_THE_TOP)


PHOTOGRAPHED = {"panel-blocks"}  # the Live page's charts photographed alone at every size and mode,
# readable or not (the blocks chart drew its two bars as one hairline before issue 37)


TO_THE_TOP = "() => { window.scrollTo(0, 0); document.querySelector('[data-testid=stMain]').scrollTo(0, 0); }"


def look(page, name: str, seen: Seen, sizes: tuple) -> None:
    """Every chart's problems and the page's overflows, at each of `sizes`."""
    cdp = page.context.new_cdp_session(page)
    for width, height in sizes:
        seen.lap("before")
        resize(page, cdp, width, height)
        seen.lap("resize")
        size = f"{width}x{height}"
        assert page.get_by_test_id("stException").count() == 0, f"{name} at {size}: an exception"
        if size in seen.stage:
            page.evaluate(TO_THE_TOP)
            page.mouse.move(0, 0)  # no tooltip over the first screen
            seen.stage[size] = page.evaluate(FIRST_SCREEN, list(STORY))
        facts = page.evaluate(geometry.CHART_FACTS)
        seen.lap("chart facts")
        seen.counts[size] = len(facts)
        problems = {chart["index"]: geometry.chart_problems(chart) for chart in facts}
        seen.charts[size] = [p for found in problems.values() for p in found]
        seen.lap("chart rules")
        seen.overflows[size] = page.evaluate(geometry.CLIPPED_OR_OUT)
        seen.lap("overflow scan")
        photograph(cdp, ARTIFACTS / f"readable-{name}-{size}.png")
        photograph_charts(page, cdp, f"{name}-{size}", {
            **{chart["index"]: f"{chart['key']}-chart{chart['index']}" for chart in facts
               if chart["key"] in PHOTOGRAPHED and name.endswith("-live")},
            **{index: f"chart{index}" for index, found in problems.items() if found}})
        seen.lap("screenshot")


def sizes_of(mode: str) -> tuple:
    return {"presenter": STAGE_SIZES, "presenter-phone": (PHONE,)}.get(mode, SIZES)


def opened(context, url: str, visit: Visit, mode: str):
    """A new tab of the mode's context (a fresh Streamlit session) on the visit's page, loading: the
    page carries on loading while the test looks at another."""
    page = context.new_page()
    joiner = "&" if "?" in visit.path else "?"
    page.goto(url + visit.path + (f"{joiner}present=1" if mode.startswith("presenter") else ""), timeout=LOAD_MS,
              wait_until="commit")
    return page


def make_visit(page, visit: Visit, mode: str) -> Seen:
    """On the page opened for this visit (at the mode's first size): wait for it, act, then look at
    its sizes."""
    started, seen = time.monotonic(), Seen()
    seen.lap("start")
    try:
        page.wait_for_selector("h1", timeout=LOAD_MS)
        seen.lap("load")
        settle(page)
        seen.lap("settle")
        seen.stage = {f"{w}x{h}": {} for w, h in STAGE.get((visit.name, mode), ())}
        if seen.stage:
            alert = page.get_by_test_id("stAlert")
            seen.before_run = {"alert": alert.first.inner_text() if alert.count() else ""}
        if visit.act:
            visit.act(page)
        seen.lap("act")
        look(page, f"{mode}-{visit.name}", seen, sizes_of(mode))
    finally:
        page.close()
    seen.seconds = time.monotonic() - started
    return seen


_SEEN: dict[tuple[str, str], Seen | Exception] = {}  # (page, mode) -> what its visit showed


@pytest.fixture(scope="module")
def contexts(chromium):
    """mode -> its browser context, opened on first use. A visit is a new tab in it: a fresh
    Streamlit session, while the tabs share the browser's cache of Streamlit's scripts."""
    made = {}

    def context(mode: str):
        if mode not in made:
            (width, height), phone = sizes_of(mode)[0], mode == "presenter-phone"
            made[mode] = chromium.new_context(viewport={"width": width, "height": height},
                                              **({"has_touch": True, "is_mobile": True} if phone else {}))
        return made[mode]
    try:
        yield context
    finally:
        for context in made.values():
            context.close()


@pytest.fixture(scope="module")
def tabs(request, contexts):
    """(page, mode) -> its tab, opened ahead: while one visit is looked at, the next one's page
    loads (on two cores the server's script run and the browser's drawing overlap with the test's
    waits). Tabs never visited close with their contexts."""
    ahead: dict[tuple[str, str], object] = {}

    def tab(key: tuple[str, str]):
        """This visit's tab (opened now, unless it was opened ahead), and the next visit's opened."""
        page = ahead.pop(key, None) or open_tab(key)
        following = VISIT_ORDER[VISIT_ORDER.index(key) + 1:] if key in VISIT_ORDER else []
        upcoming = next((k for k in following if k not in _SEEN), None)
        if upcoming and upcoming not in ahead:
            ahead[upcoming] = open_tab(upcoming)
        return page

    def open_tab(key: tuple[str, str]):
        name, mode = key
        url = request.getfixturevalue("hosted_app" if mode == "hosted" else "tiny_app")
        return opened(contexts(mode), url, VISIT_BY_NAME[name], mode)
    return tab


@pytest.fixture
def seen(request, tabs):
    """The visit of this test's (page, mode), made once for all the tests that read it, a failed one
    too (the session's servers: `hosted_app` for hosted mode, `tiny_app` for the others)."""
    key = request.node.callspec.params["name"], request.node.callspec.params["mode"]
    if key not in _SEEN:
        try:
            visited = make_visit(tabs(key), VISIT_BY_NAME[key[0]], key[1])
            print(f"\n{key[1]} {key[0]}: {visited.seconds:.1f} s ("
                  + ", ".join(f"{phase} {s:.1f}" for phase, s in visited.phases.items() if s >= 0.05) + ")")
            _SEEN[key] = visited
        except Exception as exc:  # each test of this visit reports it; none visits again
            _SEEN[key] = exc
    if isinstance(_SEEN[key], Exception):
        raise _SEEN[key]
    return _SEEN[key]


def visit_pairs() -> list[tuple[str, str]]:
    """Every (page, mode) looked at, in the order the tests below first read them."""
    pairs = [(v.name, mode) for mode in MODES for v in VISITS
             if mode in v.modes and not (mode == "hosted" and v.name in NOT_HOSTED)]
    return pairs + [("live", "presenter-phone")]


VISIT_BY_NAME = {v.name: v for v in VISITS}
VISIT_ORDER = visit_pairs()


def cases(sizes: str, check: str) -> list:
    """(page, mode) pairs looked at in `sizes` ("screen": 1280 x 720 and 1920 x 1080; "phone"), each
    with its KNOWN mark for this `check` ("charts" or "overflows")."""
    pairs = [(name, mode) for name, mode in VISIT_ORDER if mode != ("presenter-phone" if sizes == "screen" else "presenter")]
    return [pytest.param(name, mode, id=f"{mode}-{name}", marks=KNOWN.get((check, sizes, name, mode), ()))
            for name, mode in pairs]


KNOWN: dict = {}  # (check, sizes, page, mode) -> a strict xfail for a defect found and not yet fixed


def found(results: dict[str, list[str]], sizes: str) -> str:
    """What was found at the sizes named ("screen" or "phone"), a line each ("" when nothing)."""
    phone = f"{PHONE[0]}x{PHONE[1]}"
    return "\n".join(f"at {size}: {problem}" for size, problems in results.items()
                     if (size == phone) == (sizes == "phone") for problem in problems[:10])


@pytest.mark.parametrize("name, mode", cases("screen", "charts"))
def test_every_chart_is_readable_on_a_screen(seen, name, mode):
    problems = found(seen.charts, "screen")
    assert not problems, "\n" + problems


@pytest.mark.parametrize("name, mode", cases("phone", "charts"))
def test_every_chart_is_readable_on_a_phone(seen, name, mode):
    problems = found(seen.charts, "phone")
    assert not problems, "\n" + problems


@pytest.mark.parametrize("name, mode", cases("screen", "overflows"))
def test_no_element_clips_its_content_or_sticks_out_on_a_screen(seen, name, mode):
    problems = found(seen.overflows, "screen")
    assert not problems, "\n" + problems


@pytest.mark.parametrize("name, mode", cases("phone", "overflows"))
def test_no_element_clips_its_content_or_sticks_out_on_a_phone(seen, name, mode):
    problems = found(seen.overflows, "phone")
    assert not problems, "\n" + problems


@pytest.mark.parametrize("name, mode", [("live", "hosted")])
def test_after_a_hosted_run_the_texts_and_the_map_start_on_the_first_screen(seen, name, mode):
    """Issue 37: after a hosted run at 1280 x 720 the tour box pushed the written text's first line
    to y ≈ 690 and the map's first row to ≈ 715. Now at 1280 x 720 both are whole on the first
    screen, the explainer (its words name the panels by their titles) ends the page below the run,
    and at 1280 x 720 and 1920 x 1080 each story box's title is on the first screen. Before the
    run the page said where the closed sidebar is."""
    assert "» at the top left" in seen.before_run["alert"], seen.before_run
    first = seen.stage["1280x720"]
    print("after a hosted run at 1280 x 720:", {k: first[k] for k in ("line", "row", "rows", "boxes")})
    assert first["rows"] >= 2 and first["line"] <= 720 and first["row"] <= 720, first  # whole, unscrolled
    for title in ("With the KV cache", "Without a cache", "The cache, position by position"):
        assert title in first["text"]  # the explainer's names for the panels are on the page
    assert first["explainer"] > first["boxes"]["cache-map-panel"]["y"]  # below the run
    for size, facts in seen.stage.items():
        height = int(size.split("x")[1])
        assert all(b["y"] + 40 <= height for b in facts["boxes"].values()), (size, facts["boxes"])


@pytest.mark.parametrize("name, mode", [("live", "presenter"), ("replay-smollm2-135m-cpu-fp32", "presenter")])
def test_on_stage_the_figures_are_whole_and_the_story_is_on_the_first_screen(seen, name, mode):
    """Presenter mode after a run (Live) and on the shipped example (Replay), at 1280 x 720 and
    1920 x 1080: no figure card's label or value is cut, the cards lead the page, and both texts'
    and the cache map's titles and first lines (the map: its legend, layers and axis) are on the
    first screen; Replay's controls are one row near the top."""
    for size, facts in seen.stage.items():
        height = int(size.split("x")[1])
        assert facts["cards"] >= 6 and facts["cut"] == [], (size, facts["cards"], facts["cut"])
        assert facts["first_card"] < height / 3, (size, facts["first_card"])
        for key, box in facts["boxes"].items():
            seen_px = {"live": 200, "replay": 400 if key == "cache-map-panel" else 120}[name.split("-")[0]]
            assert box and box["y"] >= 0 and box["y"] + min(box["h"], seen_px) <= height, (size, key, box)
        if name.startswith("replay"):
            assert facts["play"] is not None and facts["play"] < height / 4, (size, facts["play"])
