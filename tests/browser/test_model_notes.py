"""A model whose own code does more than a plain cache, served for real and run in Chromium: the Live
page says what kvviz measured (issue 18). RecurrentGemma keeps its conv and recurrent states on its
modules, outside the cache object; the page counts them and says so beside the figures, on the
first run and the next."""
from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from browser_kit import ARTIFACTS, button

from bench.app_server import IDLE

pytestmark = pytest.mark.browser

LOAD_MS = 240_000
RUN_MS = 300_000


@pytest.fixture(scope="module")
def recurrent_gemma(tmp_path_factory):
    """A tiny RecurrentGemma saved as a local model folder."""
    from tests.engine.test_model_types import build, sized_config
    from tiny import tiny_tokenizer
    folder = tmp_path_factory.mktemp("tiny-recurrent-gemma")
    build(sized_config("recurrent_gemma")).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def test_the_live_page_says_the_model_keeps_state_on_its_modules(tiny_app, chromium, recurrent_gemma):
    """On the session's tiny server, the model opened by a link (?model=<folder>, then Load)."""
    from playwright.sync_api import expect

    context = chromium.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    try:
        page.goto(f"{tiny_app}/?max_new=8&model={quote(str(recurrent_gemma))}")
        page.get_by_role("button", name=re.compile("^Load ")).click(timeout=LOAD_MS)
        expect(button(page, "Generate")).to_be_enabled(timeout=LOAD_MS)
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
        button(page, "Generate").click()
        page.wait_for_timeout(1000)
        page.wait_for_selector(IDLE, timeout=RUN_MS)
        page.get_by_text("state on its own modules", exact=False).first.wait_for(timeout=30_000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "model-notes-recurrent-gemma.png"), full_page=True)
        text = page.locator("[data-testid=stMain]").inner_text()
        assert "This model: it keeps state on its own modules (conv1d_state, recurrent_states)" in text
        assert "Traceback" not in text
        # A second run probes a model whose modules hold the first run's state: still the same note,
        # and no false "not the same computation" (the probe's prefill is never a one-token step).
        button(page, "Generate").click()
        page.wait_for_timeout(1000)
        page.wait_for_selector(IDLE, timeout=RUN_MS)
        text = page.locator("[data-testid=stMain]").inner_text()
        assert "state on its own modules" in text and "not the same computation" not in text
    finally:
        context.close()
