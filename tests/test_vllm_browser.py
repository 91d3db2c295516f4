"""The vLLM engine page in a real Chromium against `streamlit run`: it attaches to a server (the
captured payloads of tests/vllm_fake.py), and its numbers move as new events arrive, without a
reload, while the rest of the app keeps answering."""
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from vllm_fake import FakeVllm, free_port
from vllm_payloads import frames

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 120_000


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing; CI must install Debian's chromium")
        pytest.skip(f"{CHROMIUM} is missing")
    port = free_port()
    log = tmp_path_factory.mktemp("streamlit") / "streamlit.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVVIZ_HOSTED")}
    cmd = [str(Path(sys.executable).parent / "streamlit"), "run", "app.py", "--server.headless", "true",
           "--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(15)


def metric_value(page, label: str) -> str:
    text = page.get_by_test_id("stMetric").filter(has_text=label).first.inner_text()
    return text.split("\n")[-1].strip()


def test_engine_page_updates_live_in_a_browser(app_url, tmp_path):
    from playwright.sync_api import sync_playwright

    fake = FakeVllm()
    fake.publish_captured(upto=10)
    try:
        with sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=str(CHROMIUM),
                                                        args=ARGS, viewport={"width": 1600, "height": 1000})
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
            ctx.close()
    finally:
        fake.close()
