"""Every page's share link, reopened in a fresh browser context, reproduces every setting (real
`streamlit run` + Chromium, tiny model).

Per page (and per branch: Shrink's press or quantized cache, the Planner's catalog model or a
pasted config): the settings are moved off their defaults as tests/app/test_links_roundtrip.py finds
them (every keyed widget AppTest sees, not a hand-picked list), the page is opened with them, and
then edited by hand the way a visitor does it: a preset's prompt typed over, the Sweep's peak
bandwidth typed (50; the link used to drop it), Shrink's prompt, Serving's requests and system
prompt, a pasted config.json. The link the page then shows is opened in a fresh context (no
cookie, no session): every keyed widget on it must read the same as on the first page, the typed
texts included, the link must point at itself, and nothing may have run.
"""
from __future__ import annotations

import re

import pytest
import browser_kit
from browser_kit import ARTIFACTS
from tests.app.test_links_roundtrip import SCENARIOS, TINY_CONFIG, explore

from kvviz.app import links

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOAD_MS = 240_000
PATHS = {"app.py": "/", "sweep.py": "/sweep", "shrink.py": "/shrink", "serving.py": "/serving",
         "planner.py": "/planner", "replay.py": "/replay", "engine.py": "/engine"}
TYPED = {  # widget key -> what a visitor types into it on the first page (by hand, not by URL)
    "live": {"prompt-Long document": "Summarise the text above in one line, please."},
    "sweep": {"sweep_peak_gbs": "50"},
    "shrink-press": {"shrink_prompt": "Ada kept the light. Who kept the light?"},
    "shrink-quantized": {"shrink_prompt": "Ada kept the light. Who kept the light?"},
    "serving": {"srv_requests": "What is a block?\nWhy page memory?", "srv_system": "Answer in one line."},
    "planner-pasted": {"plan_config": TINY_CONFIG.replace('"num_hidden_layers": 4', '"num_hidden_layers": 6')},
}
PINNED = {"live": {"preset": "Long document"},  # the preset whose prompt is typed over
          "serving": {"srv_share": "true"}}  # the system prompt box stays enabled, to type into

# Each keyed widget's state as a visitor sees it: its text (label, chosen option, chips, slider
# value) and the values and checks of its inputs.
SNAPSHOT_JS = """() => Object.fromEntries([...document.querySelectorAll('[class*="st-key-"]')]
  .filter(el => el.querySelector('input, textarea, [role=slider], [role=radiogroup], [role=combobox]'))
  .map(el => [[...el.classList].find(c => c.startsWith('st-key-')).slice(7),
              [el.innerText.trim(),
               ...[...el.querySelectorAll('input, textarea')].map(i => i.type === 'checkbox' || i.type === 'radio'
                                                                      ? String(i.checked) : i.value),
               ...[...el.querySelectorAll('[role=slider]')].map(s => s.getAttribute('aria-valuenow'))]]))"""


@pytest.fixture(scope="module")
def server(tiny_app):
    """The session's tiny server (tests/browser/conftest.py)."""
    return tiny_app


@pytest.fixture(scope="module")
def browser(chromium):
    return chromium


def settle(page) -> None:
    page.wait_for_selector("h1", timeout=LOAD_MS)
    browser_kit.steady(page, LOAD_MS)


def share_link(page) -> str:
    return page.get_by_test_id("stSidebar").get_by_test_id("stCode").last.inner_text(timeout=30_000).strip()


def type_into(page, key: str, text: str) -> None:
    """Type as a visitor does: select what the box holds, type over it, leave the box (commits)."""
    box = page.locator(f".st-key-{css_key(key)}").locator("textarea, input").first
    box.click(timeout=30_000)
    box.press("ControlOrMeta+a")
    box.fill(text, timeout=30_000)
    box.press("Tab" if box.evaluate("e => e.tagName") == "TEXTAREA" else "Enter")
    page.wait_for_timeout(800)
    settle(page)


def css_key(key: str) -> str:
    """A widget key as Streamlit writes it into the element's `st-key-` class."""
    return re.sub(r"[^a-zA-Z0-9_-]", "-", key.strip())


def widgets(page, want: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """The keyed widgets' states, once they read as `want`, or without `want` once there are some
    and two reads a second apart agree (at most 30 s). A number input bound to the URL fills in
    from it a few React commits after it is drawn: on a loaded machine (CI) it showed its default
    for several seconds after the page held still, then the linked value; a freshly opened Replay
    link once read no keyed widget at all where a moment later every one was drawn."""
    last = None
    for _ in range(30):
        seen = page.evaluate(SNAPSHOT_JS)
        if all(seen.get(k) == v for k, v in want.items()) if want is not None else seen and seen == last:
            break
        last = seen
        page.wait_for_timeout(1000)
    return seen


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_page_link_reopened_in_a_fresh_context_reproduces_every_setting(
        server, browser, scenario, tiny_dir, monkeypatch):
    monkeypatch.setenv("KVVIZ_MODEL", str(tiny_dir))  # the AppTest exploration's host model
    for name in ("KVVIZ_PRESENT", "KVVIZ_HOSTED", "KVVIZ_HOSTED_MODELS", "KVVIZ_VLLM_URL"):
        monkeypatch.delenv(name, raising=False)
    page_file, pinned = SCENARIOS[scenario]
    typed = TYPED.get(scenario, {})
    pairs, _ = explore(page_file, {**pinned, **PINNED.get(scenario, {})})
    typed_params = {k.split("-", 1)[0] if k.startswith(links.PROMPT_KEYS) else k for k in typed}
    pairs = [(k, v) for k, v in pairs if k not in typed_params or k in pinned]
    path = PATHS[page_file.rsplit("/", 1)[-1]]
    first = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
    try:
        first.goto(f"{server}{path}?{links.encode(pairs)}")
        settle(first)
        for key, text in typed.items():
            type_into(first, key, text)
        before = widgets(first)
        link = share_link(first)
        first.screenshot(path=str(ARTIFACTS / f"share-link-{scenario}-first.png"), full_page=True)
    finally:
        first.context.close()
    print(scenario, link, {k: v[1:] for k, v in before.items()})
    assert before, "no keyed widget found on the page"
    for key, text in typed.items():  # the typed values are what the first page shows
        assert text.splitlines()[0] in " ".join(before[css_key(key)]), (key, before.get(css_key(key)))
    again = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    try:
        again.goto(link)
        settle(again)
        after = widgets(again, before)
        again.screenshot(path=str(ARTIFACTS / f"share-link-{scenario}-reopened.png"), full_page=True)
        assert share_link(again) == link  # the reopened page links to itself
        assert not again.get_by_test_id("stException").count()
        if page_file in ("sweep.py", "shrink.py", "serving.py"):  # nothing ran: no result drawn
            assert not again.get_by_test_id("stVegaLiteChart").count()
    finally:
        again.context.close()
    lost = {k: (v, after.get(k)) for k, v in before.items() if after.get(k) != v}
    assert not lost, f"{scenario}: {link} lost {lost}"
