"""The app as people meet it: `streamlit run app.py` started as `make run` starts it, and Debian's
Chromium launched the way this machine allows. One place for the page benchmarks, the real-browser
tests and the screenshot scripts.

`Server` is stopped by its pid on exit, whatever happened; its log lands in `log_path` (kept for
a test's artifacts) or a temporary file, and its tail is quoted when the server fails to start.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium keeps calling out of a closed network.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
RUNNING = "[data-testid='stApp'][data-test-script-state='running']"
# kvviz settings of the calling environment that would change what the server shows.
HOST_SETTINGS = ("KVVIZ_MODEL", "KVVIZ_PRESENT", "KVVIZ_HOSTED", "KVVIZ_HOSTED_MODELS")


def free_port(ports: range | None = None) -> int:
    """The first port of `ports` nobody listens on (any free port when None)."""
    for port in ports or [0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return s.getsockname()[1]
            except OSError:
                continue
    raise RuntimeError(f"no free port in {ports.start}–{ports.stop - 1}")


def server_env(env_extra: dict | None = None) -> dict:
    """This environment, offline and quiet, without the host's kvviz settings, plus `env_extra`."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    for name in HOST_SETTINGS:
        env.pop(name, None)
    return {**env, **(env_extra or {})}


def die_with_parent() -> None:
    """In a child, before exec (`preexec_fn`): SIGTERM when the process that started it dies
    (Linux's PR_SET_PDEATHSIG), so a test process killed outright (pytest-timeout's os._exit,
    `timeout`, CI's stop) leaves no server behind; its finally does not run then. Found: two vLLM
    servers orphaned by a killed test run."""
    _PRCTL(1, signal.SIGTERM)


_PRCTL = ctypes.CDLL(None).prctl  # resolved in the parent: the child between fork and exec loads nothing


class Server:
    """`streamlit run app.py` from the repository root (or `app_dir`) on a free port; `url` once it is healthy."""

    def __init__(self, env_extra: dict | None = None, ports: range | None = None,
                 log_path: Path | None = None, start_timeout_s: float = 180, app_dir: Path = ROOT):
        self.port, self.app_dir = free_port(ports), app_dir
        self.url = f"http://127.0.0.1:{self.port}"
        self.env_extra, self.log_path, self.start_timeout_s = env_extra, log_path, start_timeout_s

    def __enter__(self) -> "Server":
        if self.log_path is None:
            self.log = tempfile.NamedTemporaryFile("w+", prefix="kvviz-streamlit-", suffix=".log")
        else:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self.log = open(self.log_path, "w+")
        streamlit = Path(sys.executable).parent / "streamlit"
        self.proc = subprocess.Popen(
            [str(streamlit), "run", "app.py", "--server.port", str(self.port), "--server.headless", "true",
             "--server.address", "127.0.0.1"],
            cwd=self.app_dir, env=server_env(self.env_extra), stdout=self.log, stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent)
        try:
            self.wait_healthy(self.start_timeout_s)
        except BaseException:
            self.__exit__()
            raise
        return self

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise TimeoutError(f"streamlit did not answer within {timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()[-3000:]

    def __exit__(self, *exc) -> bool:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)
        self.log.close()
        return False


_PLAYWRIGHT = []  # the process's one Playwright, once started


def playwright():
    """The process's one Playwright, started on first use and stopped at exit. Its sync API cannot
    run twice at once in a thread: every test, benchmark and script in a process shares this one."""
    if not _PLAYWRIGHT:
        from playwright.sync_api import sync_playwright
        _PLAYWRIGHT.append(sync_playwright().start())
        atexit.register(_PLAYWRIGHT[0].stop)
    return _PLAYWRIGHT[0]


def shared_playwright():
    """`with shared_playwright() as pw:` where `with sync_playwright() as pw:` would start a second one."""
    return contextlib.nullcontext(playwright())


def chromium_context(pw, profile_dir, viewport: dict):
    """A fresh persistent Chromium context (playwright refuses `--user-data-dir` in args)."""
    return pw.chromium.launch_persistent_context(str(profile_dir), executable_path=str(CHROMIUM),
                                                 args=CHROMIUM_ARGS, viewport=viewport)
