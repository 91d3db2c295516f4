"""`make vllm-demo`'s plumbing (scripts/vllm_demo.sh) without vLLM: a fake server on a non-default
port stands in for vLLM (through KVVIZ_VLLM_VENV, the venv vllm_serve.sh runs), and fakes for the
dashboard and the load record what the script handed them and the order they were stopped in.

Checked: the dashboard is told the demo's own server (KVVIZ_VLLM_URL) and the printed engine-page
link names it; when DEMO_SECONDS ends the load stops first, then the server, and the state file the
engine page reads says "ended" while the dashboard is still up. The engine page's side of it
(the message, no retries) is checked headless with AppTest.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from streamlit.testing.v1 import AppTest

from bench.app_server import free_port
from kvviz.app import vllm_panels as panels

ROOT = Path(__file__).resolve().parent.parent

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
           "DEMO_SECONDS": "3", "DEMO_LINGER_SECONDS": "1", "DEMO_ROUNDS": "1"}
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
    assert stops == ["load stopped (state running)", "server stopped (state running)",
                     "dashboard stopped (state ended)"], events


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
