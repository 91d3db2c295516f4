"""Why the dashboard limits torch's threads: the live page in Chromium with kvviz's thread policy
(kvviz.app.threads) against torch's own default, two `streamlit run` servers side by side.

Not in the default `make bench` (it adds minutes); run it with `python -m bench --only live-threads`
on the machine you deploy to, and set `KVVIZ_TORCH_THREADS` if it disagrees.
"""
from __future__ import annotations

import tempfile

from bench.app_server import chromium_context
from bench.browser_page import VIEWPORT, Server, open_page, page_run, rates, screen_moments
from bench.results import Result, interleaved, medians, spread
from bench.settings import Settings

VARIANTS = {"policy": {}, "torch default": {"KVVIZ_TORCH_THREADS": "0"}}  # server environments


def page_rates(page) -> dict:
    run = page_run(page)
    return rates(run, screen_moments(run["marks"], run["texts"]))


def thread_policy(s: Settings) -> tuple[list[Result], str]:
    from bench.app_server import shared_playwright
    with Server(VARIANTS["policy"]) as ours, Server(VARIANTS["torch default"]) as theirs, \
            shared_playwright() as pw, tempfile.TemporaryDirectory(prefix="kvviz-bench-chromium-") as profile:
        context = chromium_context(pw, profile, VIEWPORT)
        try:
            pages = {"policy": open_page(context, ours.url, False, s.new_tokens),
                     "torch default": open_page(context, theirs.url, False, s.new_tokens)}
            variants = {name: (lambda page=page: page_rates(page)) for name, page in pages.items()}
            interleaved(variants, 1)  # warm-up round
            runs = interleaved(variants, s.browser_reps)
        finally:
            context.close()
    return thread_rows(runs), thread_method(s, runs)


def thread_rows(runs: dict[str, list[dict]]) -> list[Result]:
    rows = []
    for key, what in (("wall", "wall-clock"), ("compute", "compute-only")):
        m = medians({name: [r[key] for r in values] for name, values in runs.items()})
        rows.append(Result(f"Live page {what} decode tokens/s, torch threads by kvviz's policy / "
                           "torch's default", f"{m['policy']:.2f} tok/s", f"{m['torch default']:.2f} tok/s",
                           m["policy"] / m["torch default"], None, None))
    return rows


def thread_method(s: Settings, runs: dict[str, list[dict]]) -> str:
    of = lambda name, key: spread([r[key] for r in runs[name]])  # noqa: E731
    return ("Two servers started as `make run` starts them, one with kvviz's thread policy "
            "(all cores but one; kvviz/app/threads.py) and one with `KVVIZ_TORCH_THREADS=0` (torch's "
            f"own choice), one Chromium tab on each, race off, {s.new_tokens} new tokens; one warm-up "
            f"round, then {s.browser_reps} interleaved rounds. Policy: wall {of('policy', 'wall')}, "
            f"compute {of('policy', 'compute')} tok/s; torch default: wall "
            f"{of('torch default', 'wall')}, compute {of('torch default', 'compute')} tok/s.")
