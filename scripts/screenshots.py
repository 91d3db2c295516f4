"""Retake the README's screenshots from a running kvviz: `make run` (or `make present`), then

    .venv/bin/python scripts/screenshots.py http://127.0.0.1:8501

Each page at 1600 x 1000 in Debian's Chromium (a fresh profile per page), after pressing its run
button where it has one: docs/screenshot.png (the Live page mid-generation) and
docs/screenshot-<page>.png; docs/screenshot-present.png is the Live page in presenter mode at
1920 x 1080 after a run. Take them on a quiet machine: the figures in them are live timings.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

from bench.app_server import CHROMIUM, CHROMIUM_ARGS, IDLE, RUNNING

DOCS = Path(__file__).resolve().parent.parent / "docs"
WAIT_MS = 600_000
PAGES = [  # (file name, path, button to press or None, ready selector)
    ("live", "/?dtype=float32", "Generate", "h1"),
    ("replay", "/replay", None, "[data-testid=stMetric]"),
    ("sweep", "/sweep?sweep_new=4", "Run sweep", "h1"),
    ("serving", "/serving", "Run", "h1"),
    ("planner", "/planner", None, "h1"),
    ("engine", "/engine", None, "h1"),
]



def labelled(page, label: str):
    """The button labelled `label`, with or without the keyboard shortcut it shows (kvviz.app.keys)."""
    return page.get_by_role("button", name=re.compile(rf"^{re.escape(label)}( Shortcut \S+)?$"))

def settle(page) -> None:
    page.wait_for_timeout(1500)
    page.wait_for_selector(IDLE, timeout=WAIT_MS)
    page.wait_for_timeout(1500)


def open_page(browser, url: str, ready: str, width: int, height: int):
    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    page.goto(url)
    page.wait_for_selector(ready, timeout=WAIT_MS)
    settle(page)
    return page


def live_mid_run(page) -> None:
    """docs/screenshot.png: the Live page while the text and the cache map grow."""
    labelled(page, "Generate").click()
    page.wait_for_selector(RUNNING, timeout=60_000)
    page.wait_for_function("() => (document.querySelector('.st-key-cached-panel [data-testid=stCode]')"
                           "?.innerText || '').trim().split(/\\s+/).length >= 20", timeout=WAIT_MS)
    page.wait_for_timeout(1000)  # the figures refresh a few times a second
    page.screenshot(path=str(DOCS / "screenshot.png"))


def serving_mid_run(page) -> None:
    """The finished Serving run scrubbed back to a middle step, when the pool is busiest."""
    slider = page.locator("input[aria-label='Step']")
    slider.focus()
    page.keyboard.press("Home")
    for _ in range(17):
        page.keyboard.press("ArrowRight")
    settle(page)


def shoot(browser, base: str, name: str, path: str, button: str | None, ready: str) -> None:
    page = open_page(browser, base + path, ready, 1600, 1000)
    try:
        if name == "live":
            live_mid_run(page)
            settle(page)
        elif button:
            labelled(page, button).click()
            settle(page)
        if name == "serving":
            serving_mid_run(page)
        page.screenshot(path=str(DOCS / f"screenshot-{name}.png"))
        print(f"docs/screenshot-{name}.png")
    finally:
        page.context.close()


def main(base: str) -> None:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for name, path, button, ready in PAGES:
                shoot(browser, base, name, path, button, ready)
            page = open_page(browser, base + "/?present=1&dtype=float32", "h1", 1920, 1080)
            labelled(page, "Generate").click()
            settle(page)
            page.screenshot(path=str(DOCS / "screenshot-present.png"))
        finally:
            browser.close()


if __name__ == "__main__":
    main(sys.argv[1].rstrip("/") if len(sys.argv) > 1 else "http://127.0.0.1:8501")
