"""The live-page browser benchmark, end to end on a tiny model: `streamlit run` + Chromium +
the headless worker. Structure and arithmetic only, never speed (tests/bench/test_bench.py checks
the verdicts; `make bench` measures). Fails, never skips, under CI when Chromium is missing."""
from __future__ import annotations

import os
import re

import pytest
from browser_kit import require_chromium

from bench import browser_page
from bench.results import OPS
from bench.settings import Settings

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Tokens a run: enough that a run spans several of the page's text frames (cadence.TEXT_S) even on
# a loaded machine. With 6, a run took about one frame: the browser could show the old run's text,
# the blank and the new text in one paint, and no token was ever seen appearing (CI, stop 46).
TOKENS = 96


@pytest.fixture(scope="module")
def chromium():
    require_chromium()


@pytest.mark.long("the benchmark's own rounds: page, headless and race on, in Chromium")
def test_browser_benchmark_measures_page_and_headless_on_a_tiny_model(chromium, tiny_dir, monkeypatch):
    # the suite's other worker keeps the cores busy: each run would wait the whole bound for quiet
    # cores (8 s × 8 runs; fresh30: 129 s against 62-80 s before)
    monkeypatch.setattr(browser_page, "QUIET_MAX_S", 0.0)
    s = Settings(browser_reps=1, new_tokens=TOKENS)
    rows, method = browser_page.browser_vs_headless(s, browser_page.default_bench(s, str(tiny_dir)))
    assert [r.op for r in rows] == [">=", ">=", ">=", None, None, None, "<=", None]
    assert [r.limit for r in rows] == [0.95, browser_page.WALL_TARGET, browser_page.OWN_WALL_TARGET, None,
                                       None, None, browser_page.RACE_TARGET, None]
    assert all("(default model" in r.name for r in rows) and "both at 1 torch thread" in rows[0].name
    for row in rows:
        assert row.ratio > 0 and row.measured.split()[0] != "0.00"
        assert row.passed == (None if row.op is None else OPS[row.op](row.ratio, row.limit))
    assert f"max_new={TOKENS}" in method and "n=1" in method and "tokens per run" in method
    assert f"the prompt {browser_page.LONG_ANSWER!r} (as the page's trace records it)" in method  # `?prompt=` reached the box
    server = re.search(r"by kvviz's policy: (\d+) \(torch's default here: (\d+)\)", method)
    headless = re.search(r"the server's thread policy, (\d+) thread", method)
    assert server and headless and server[1] == headless[1], method  # a fair comparison: same threads


def test_benchmark_server_uses_the_ports_given_and_is_stopped(chromium):
    with browser_page.Server() as server:
        assert browser_page.PORTS.start <= server.port < browser_page.PORTS.stop
        pid = server.proc.pid
    assert server.proc.poll() is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
