"""The vLLM engine page in a real Chromium against `streamlit run`: it attaches to a server (the
captured payloads of tests/vllm_fake.py), and its numbers move as new events arrive, without a
reload, while the rest of the app keeps answering."""
import re
import time
import urllib.request

import pytest

from vllm_fake import FakeVllm
from vllm_payloads import frames

pytestmark = pytest.mark.browser
WAIT_MS = 120_000


@pytest.fixture(scope="module")
def app_url(tiny_app):
    """The session's tiny server (tests/browser/conftest.py): the engine page needs no model."""
    return tiny_app


def metric_value(page, label: str) -> str:
    text = page.get_by_test_id("stMetric").filter(has_text=label).first.inner_text()
    return text.split("\n")[-1].strip()


def test_engine_page_updates_live_in_a_browser(app_url, chromium):
    fake = FakeVllm()
    fake.publish_captured(upto=10)
    try:
        ctx = chromium.new_context(viewport={"width": 1600, "height": 1000})
        try:
            page = ctx.new_page()
            page.goto(app_url + "/engine", timeout=WAIT_MS)
            area = page.get_by_label(re.compile("vLLM base URLs"))
            area.fill(fake.url)
            area.press("Control+Enter")
            page.get_by_test_id("stMetric").first.wait_for(timeout=WAIT_MS)
            shows = ("() => [...document.querySelectorAll('[data-testid=stMetric]')].some("
                     "m => m.innerText.includes('Stored / evicted') && m.innerText.includes('{}'))")
            page.wait_for_function(shows.format("57 / 0"), timeout=WAIT_MS)  # 10 batches replayed
            first = metric_value(page, "Stored / evicted")
            for f in frames()[10:]:  # the rest of the capture arrives while the page is open
                fake.publish(int.from_bytes(f[1], "big"), f[2])
                time.sleep(0.002)
            page.wait_for_function(shows.format("/ 104"), timeout=WAIT_MS)  # no reload: the fragment ticks
            assert first == "57 / 0" and metric_value(page, "Stored / evicted") == "183 / 104"
            assert page.locator("[data-testid='stVegaLiteChart']").count() >= 5
            with urllib.request.urlopen(app_url + "/_stcore/health", timeout=5) as resp:
                assert resp.status == 200  # the server keeps serving while the fragment ticks
        finally:
            ctx.close()
    finally:
        fake.close()
