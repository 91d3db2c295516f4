"""`make vllm-demo`'s plumbing (scripts/vllm_demo.sh) without vLLM: a fake server on a non-default
port stands in for vLLM (through KVVIZ_VLLM_VENV, the venv vllm_serve.sh runs), and fakes for the
dashboard and the load record what the script handed them and the order they were stopped in.

Checked: the dashboard is told the demo's own server (KVVIZ_VLLM_URL) and the printed engine-page
link names it; when DEMO_SECONDS ends the load stops first, the state file the engine page reads
says "ended" (the page detaches), then the server stops, and the dashboard stays up. The engine
page's side of it (the message, no retries) is checked headless with AppTest. And once with the
real vLLM and Chromium (slow: ~3-5 min, most of it vLLM starting).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from bench.app_server import free_port
from browser_kit import ARTIFACTS
from kvviz.vllm import panel as panels

pytestmark = pytest.mark.slow  # starts demo processes: make test, not make check

ROOT = Path(__file__).resolve().parents[2]

FAKE = textwrap.dedent('''
    import http.server, os, signal, sys, time
    log = lambda line: open(os.environ["FAKE_EVENTS"], "a").write(line + "\\n")
    role = sys.argv[1]
    def bye(*_):
        state = open(os.environ["KVVIZ_DEMO_STATE"]).read().split()[0]
        log(f"{role} stopped (state {state})")
        os._exit(0)
    signal.signal(signal.SIGTERM, bye)
    if role == "server":  # python -m vllm.entrypoints... --port N
        port = int(sys.argv[sys.argv.index("--port") + 1])
        class Health(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200 if self.path == "/health" else 404); self.end_headers()
            def log_message(self, *a): pass
        log(f"server up on {port}")
        http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    if role == "dashboard":
        log(f"dashboard url {os.environ.get('KVVIZ_VLLM_URL')} args {' '.join(sys.argv[2:])}")
    if role == "load":
        log(f"load against {sys.argv[sys.argv.index('--url') + 1]}")
    while True:
        time.sleep(0.1)
''')


def demo_port() -> int:
    """8850 (the issue's port) when free, else any free port: never the default 8000."""
    try:
        return free_port(range(8850, 8851))
    except RuntimeError:
        return free_port()


def fakes(tmp_path: Path) -> dict:
    (tmp_path / "fake.py").write_text(FAKE)
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    python = venv_bin / "python"  # what vllm_serve.sh execs: `$VENV/bin/python -m vllm... --port N`
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "fake.py"} server "$@"\n')
    python.chmod(0o755)
    fake = f"{sys.executable} {tmp_path / 'fake.py'}"
    return {"KVVIZ_VLLM_VENV": str(tmp_path / "venv"), "KVVIZ_VLLM_MODEL": "fake-model",
            "DEMO_STREAMLIT": f"{fake} dashboard", "DEMO_LOAD": f"{fake} load",
            "DEMO_RUNS": str(tmp_path / "runs"), "FAKE_EVENTS": str(tmp_path / "events.log")}


def test_the_demo_attaches_to_its_own_port_and_ends_load_first(tmp_path):
    port = demo_port()
    env = {**os.environ, **fakes(tmp_path), "KVVIZ_VLLM_PORT": str(port), "PORT": "0",
           "DEMO_SECONDS": "3", "DEMO_LINGER_SECONDS": "1", "DEMO_DETACH_SECONDS": "1", "DEMO_ROUNDS": "1"}
    proc = subprocess.Popen(["bash", "scripts/vllm_demo.sh"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    events = (tmp_path / "events.log").read_text().splitlines()
    url = f"http://127.0.0.1:{port}"
    assert proc.returncode == 0, out
    assert f"engine_urls=http%3A%2F%2F127.0.0.1%3A{port}" in out, out
    assert f"server up on {port}" in events and f"load against {url}" in events, events
    assert any(e.startswith(f"dashboard url {url} args run app.py") for e in events), events
    stops = [e for e in events if "stopped" in e]
    # "ended" goes out between the load and the server: the engine page detaches before the server goes
    assert stops == ["load stopped (state running)", "server stopped (state ended)",
                     "dashboard stopped (state ended)"], events
    assert out.count("load stopped") == 1, out  # the exit trap does not end the demo a second time


def test_the_engine_page_says_the_demo_ended_and_stops_watching(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.write_text("ended 1\n")
    monkeypatch.delenv("KVVIZ_HOSTED", raising=False)
    monkeypatch.setenv("KVVIZ_DEMO_STATE", str(state))
    monkeypatch.setenv("KVVIZ_VLLM_URL", "http://127.0.0.1:9")
    try:
        at = AppTest.from_file(str(ROOT / "app_pages" / "engine.py"), default_timeout=60).run()
        assert not at.exception
        assert any("demo has ended" in s.value for s in at.success)
        assert not at.warning  # no "connection refused" retried on screen
        assert "`None`" not in [m.value for m in at.markdown], "Streamlit's magic printed a stray None"
        assert not panels.watch_for("http://127.0.0.1:9").running
    finally:
        panels.watch_for("http://127.0.0.1:9").stop()
        panels.watch_for.clear()


def test_demo_state_is_read_only_from_its_file(tmp_path):
    assert panels.demo_ended({}) is False
    assert panels.demo_ended({"KVVIZ_DEMO_STATE": str(tmp_path / "missing")}) is False
    (tmp_path / "s").write_text("running 5\n")
    assert panels.demo_ended({"KVVIZ_DEMO_STATE": str(tmp_path / "s")}) is False
    (tmp_path / "s").write_text("ended 9\n")
    assert panels.demo_ended({"KVVIZ_DEMO_STATE": str(tmp_path / "s")}) is True


DEMO_START_TIMEOUT_S = 600  # vLLM --enforce-eager: ~1 min on a quiet 2-core machine, 3.5 min measured loaded
DEMO_SECONDS, DETACH_SECONDS, LINGER_SECONDS = 30, 6, 8  # the pages attach within the 30 s or fail


def wait_for_output(proc: subprocess.Popen, out_path: Path, text: str, timeout_s: float) -> str:
    """The demo's output once it contains `text` (bounded); a failure quotes its tail."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = out_path.read_text()
        if text in out:
            return out
        if proc.poll() is not None:
            pytest.fail(f"the demo exited with {proc.returncode} before {text!r}:\n{out[-3000:]}")
        time.sleep(1)
    pytest.fail(f"no {text!r} from the demo within {timeout_s:.0f} s:\n{out_path.read_text()[-3000:]}")


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.long("vLLM starts on CPU (~1 min), then the demo's own load runs its 30 s")
def test_the_real_demo_attaches_to_its_own_port_and_ends_cleanly(tmp_path):
    """`make vllm-demo`'s script with the real vLLM (.venv-vllm) on a port other than 8000: the
    printed engine-page link and the page opened without one both watch this server, the page
    says the demo ended, no request got an HTTP 500 and no retry was logged after the end.
    Every wait is bounded; the demo's whole process group is stopped in `finally`."""
    from bench.app_server import CHROMIUM, CHROMIUM_ARGS
    from browser_kit import require_chromium
    from playwright.sync_api import expect

    from bench.app_server import shared_playwright
    from tests.vllm.test_integration import VENV, opted_out, stop

    if opted_out():
        pytest.skip("KVVIZ_SKIP_VLLM=1 (outside CI): the real-vLLM demo test is skipped on request")
    if not (VENV / ".installed").exists():
        pytest.fail(f"{VENV} is missing: `make test` creates it (scripts/vllm_install.sh)")
    require_chromium()
    port, dashboard = demo_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    runs, out_path = tmp_path / "runs", tmp_path / "demo.out"
    env = {**os.environ, "PORT": str(dashboard), "KVVIZ_VLLM_PORT": str(port),
           "KVVIZ_VLLM_EVENTS_PORT": str(free_port()), "KVVIZ_VLLM_REPLAY_PORT": str(free_port()),
           "DEMO_SECONDS": str(DEMO_SECONDS), "DEMO_DETACH_SECONDS": str(DETACH_SECONDS),
           "DEMO_LINGER_SECONDS": str(LINGER_SECONDS), "DEMO_ROUNDS": "1", "DEMO_RUNS": str(runs),
           "DEMO_STREAMLIT": str(Path(sys.executable).parent / "streamlit")}
    with open(out_path, "w") as out:
        proc = subprocess.Popen(["bash", "scripts/vllm_demo.sh"], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        link = wait_for_output(proc, out_path, "vLLM is up", DEMO_START_TIMEOUT_S).split("open ")[-1].split()[0]
        assert f"engine_urls=http%3A%2F%2F127.0.0.1%3A{port}" in link, link
        with shared_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                pages = [browser.new_page(viewport={"width": 1600, "height": 1000}) for _ in range(2)]
                for page, address in zip(pages, (link, f"http://127.0.0.1:{dashboard}/engine")):
                    page.goto(address, timeout=120_000)
                for page in pages:  # attached: the status line names the served model
                    page.get_by_text(re.compile(rf"127\.0\.0\.1:{port}: vLLM 0\.32")).first.wait_for(timeout=120_000)
                    expect(page.get_by_label(re.compile("vLLM base URLs"))).to_have_value(url, timeout=30_000)
                for page in pages:
                    page.get_by_text("The vLLM demo has ended").wait_for(timeout=(DEMO_SECONDS + 90) * 1000)
                page.wait_for_timeout(DETACH_SECONDS * 1000 + 4000)  # the server has gone by now
                texts = [p.evaluate("document.body.innerText") for p in pages]
                stored = pages[0].get_by_test_id("stMetric").filter(has_text="Stored / evicted").first.inner_text()
                pages[0].screenshot(path=str(ARTIFACTS / "vllm-demo-ended.png"), full_page=True)
            finally:
                browser.close()
        assert proc.wait(timeout=LINGER_SECONDS + 120) == 0, out_path.read_text()[-3000:]
        for text in texts:
            assert "127.0.0.1:8000" not in text and "connection refused" not in text, text[-2000:]
        # the load ran, and the page read this server's KV events: blocks stored (the shared system prompt)
        assert int(stored.split("\n")[-1].split("/")[0]) > 0, stored
        log = (runs / "server.log").read_text()
        assert not re.search(r'" 5\d\d ', log), [line for line in log.splitlines() if re.search(r'" 5\d\d ', line)]
        out = out_path.read_text()
        assert out.count("load stopped") == 1 and "the demo ended" in out, out
    finally:
        stop(proc)
