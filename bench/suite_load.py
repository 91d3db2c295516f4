"""The tests that start processes (servers, browsers, writers), quiet and while both cores are busy.

A CI machine is busy. This runs the same test files twice side by side: once as they are and once
while one busy-loop process per core competes with them, and checks that the loaded run ends within
its bound and passes; the ratio of the two wall times is what the load costs.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from contextlib import contextmanager

from bench.results import Result
from bench.settings import Settings

# Every test file that starts a process and waits on it; the vLLM server's only in the full run.
PROCESS_TESTS = ("tests/vllm/test_integration_helpers.py", "tests/scripts/test_vllm_demo.py", "tests/core/test_files.py")
FULL_ONLY = ("tests/browser/test_visitors.py", "tests/vllm/test_integration.py")
BOUND_S = 3600  # the loaded run is killed here: the bound it must end within
BUSY_LOOP = "while True: pass"


def process_test_files(s: Settings) -> list[str]:
    return list(PROCESS_TESTS + FULL_ONLY if s.suite_vllm else PROCESS_TESTS)


@contextmanager
def busy_cores(n: int):
    """`n` processes that each keep one core busy until the block ends (killed in a finally)."""
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(n)]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(timeout=30)


def pytest_run(files: list[str], bound_s: float) -> dict:
    """Wall seconds, exit status and pytest's summary line of one run of `files` (killed at the bound)."""
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *files],
                              capture_output=True, text=True, timeout=bound_s)
        rc, out = done.returncode, done.stdout
    except subprocess.TimeoutExpired as e:
        rc, out = None, e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
    return {"seconds": time.perf_counter() - start, "rc": rc, "summary": summary_line(out)}


def summary_line(out: str) -> str:
    """pytest's last line, e.g. '12 passed in 80.1s', or what happened when there is none; with
    the test ids that failed, so the report says which."""
    lines = [ln.strip() for ln in out.strip().splitlines() if ln.strip()]
    found = [ln for ln in lines if re.search(r"\d+ (passed|failed|error)", ln)]
    summary = found[-1].strip("= ") if found else "no summary (killed at the bound)"
    failed = [ln.split(" - ")[0].split(" ", 1)[1] for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
    return f"{summary}: {', '.join(failed)}" if failed else summary


def suite_load(s: Settings) -> tuple[list[Result], str]:
    files, cores = process_test_files(s), os.cpu_count() or 1
    quiet = pytest_run(files, BOUND_S)
    with busy_cores(cores):
        loaded = pytest_run(files, BOUND_S)
    ended = loaded["rc"] is not None
    rows = [Result("Process-starting tests under load: wall time loaded / quiet",
                   f"{loaded['seconds']:.0f} s", f"{quiet['seconds']:.0f} s",
                   loaded["seconds"] / quiet["seconds"], "<=", 4.0),
            Result(f"Process-starting tests under load: ended and passed ({loaded['summary']})",
                   "passed" if loaded["rc"] == 0 else ("failed" if ended else "killed at the bound"),
                   "passed" if quiet["rc"] == 0 else "failed", 1.0 if loaded["rc"] == 0 else 0.0, ">=", 1.0)]
    return rows, (
        f"The test files that start a process and wait on it ({', '.join(files)}) run with pytest "
        f"twice in a row: quiet ({quiet['summary']}, {quiet['seconds']:.0f} s), then while {cores} "
        f"busy-loop processes keep every core busy ({loaded['summary']}, {loaded['seconds']:.0f} s). "
        f"The loaded run is killed at {BOUND_S} s; each test is also held to the suite's own per-test "
        "timeout (pytest-timeout, pyproject.toml). The targets: the loaded run ends and passes, in at "
        "most 4x the quiet time.")
