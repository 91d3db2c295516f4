"""Memory over many live-page generations in one process (AppTest, race on)."""
from __future__ import annotations

import json
import sys

from bench.apptest_page import check_page, open_live_page
from bench.results import Result
from bench.settings import Settings
from bench.subproc import run_json


def rss_bytes() -> int:
    """This process's resident memory now (Linux /proc)."""
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb * 1024


def soak_rss(runs: int) -> dict:
    """Click Generate `runs` times on one live page (race on); RSS after the first and the last."""
    import gc
    at = open_live_page(16)
    at.toggle(key="race").set_value(True)
    after = []
    for _ in range(runs):
        at.button(key="generate").click().run()
        check_page(at)
        gc.collect()
        after.append(rss_bytes())
    return {"first": after[0], "last": after[-1], "peak": max(after)}


def soak(s: Settings) -> tuple[list[Result], str]:
    rss = run_json("bench.soak", str(s.soak_runs), what="the soak benchmark")
    mib = lambda n: f"{n / 2**20:,.0f} MiB"  # noqa: E731
    row = Result(f"Soak: process memory after {s.soak_runs} generations / after the first",
                 mib(rss["last"]), mib(rss["first"]), rss["last"] / rss["first"], "<=", 1.05)
    return [row], (
        f"One fresh process drives the live page (AppTest, race on, 16 new tokens) through "
        f"{s.soak_runs} consecutive generations on one model and reads its resident memory "
        f"(VmRSS) after each, following a garbage collection: after the first "
        f"{mib(rss['first'])}, after the last {mib(rss['last'])}, peak {mib(rss['peak'])}. "
        "Each run replaces the session's trace, and its charts' Vega-Lite dicts are reused, so memory should "
        "stay flat after the first run.")


if __name__ == "__main__":  # the subprocess side: `python -m bench.soak RUNS`
    print(json.dumps(soak_rss(int(sys.argv[1]))))
