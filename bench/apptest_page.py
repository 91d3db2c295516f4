"""The live page in Streamlit's AppTest (a harness: no server, no browser) vs headless runs.

A second opinion beside bench.browser_page, which measures the page as people see it.
Runs in a fresh process (`python -m bench.apptest_page`) whose main thread never runs torch.
"""
from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from bench.results import Result, interleaved, medians, spread
from bench.settings import Settings
from bench.subproc import run_json

APP = Path(__file__).resolve().parent.parent / "app.py"


class GenerateSpy:
    """Stands in for `kvviz.engine.loop.generate` (which the live page calls) to time its token loop.

    The clock starts when the page asks for the first event and stops when it asks for the one
    after the last, so the window holds every step plus everything the page did with each event.
    EOS is ignored so that every run yields exactly max_new_tokens events.
    """

    def __init__(self):
        self.lm = self.cfg = None
        self.tokens, self.wall_s = 0, 0.0

    def __enter__(self):
        from kvviz.engine import loop as engine
        self.real = engine.generate
        engine.generate = self.generate
        return self

    def __exit__(self, *exc):
        from kvviz.engine import loop as engine
        engine.generate = self.real
        return False

    def generate(self, lm, cfg, mode="cached", should_stop=None):
        self.lm, self.cfg = lm, dataclasses.replace(cfg, stop_on_eos=False)
        return self.timed(self.real(lm, self.cfg, mode, should_stop))

    def timed(self, events):
        start, count = time.perf_counter(), 0
        for event in events:
            count += 1
            yield event
        self.tokens, self.wall_s = count, time.perf_counter() - start


class PageClock:
    """Times the live page's work per event (`LiveView.update`) and its chart redraws
    (`LiveView.draw_figures`) while installed; the final redraw after a run is left out."""

    def __enter__(self):
        from kvviz.live import view_panel
        self.real_update, self.real_draw = view_panel.LiveView.update, view_panel.LiveView.draw_figures
        self.update_ms: list[float] = []
        self.draw_ms: list[float] = []
        self.final, clock = False, self

        def update(view, trace, final=False):
            clock.final, start = final, time.perf_counter()
            try:
                return clock.real_update(view, trace, final)
            finally:
                if not final:
                    clock.update_ms.append((time.perf_counter() - start) * 1e3)
                clock.final = False

        def draw_figures(view, *args, **kwargs):
            start = time.perf_counter()
            try:
                return clock.real_draw(view, *args, **kwargs)
            finally:
                if not clock.final:
                    clock.draw_ms.append((time.perf_counter() - start) * 1e3)

        view_panel.LiveView.update, view_panel.LiveView.draw_figures = update, draw_figures
        return self

    def __exit__(self, *exc):
        from kvviz.live import view_panel
        view_panel.LiveView.update, view_panel.LiveView.draw_figures = self.real_update, self.real_draw
        return False

    def reset(self) -> None:
        self.update_ms, self.draw_ms = [], []

    def notes(self, runs: int, page_wall_s: float) -> str:
        """Where the page's time went, per run, for the method paragraph."""
        text_ms = (sum(self.update_ms) - sum(self.draw_ms)) / max(len(self.update_ms), 1)
        return (f"Per page run: {len(self.update_ms) / runs:.0f} updates (text), "
                f"{text_ms:.1f} ms each beside the charts; {len(self.draw_ms) / runs:.0f} chart "
                f"redraws ({len(self.draw_ms) / page_wall_s:.1f} per second of generation), median "
                f"{statistics.median(self.draw_ms):.0f} ms each, the first (which builds the charts' "
                f"Vega-Lite) up to {max(self.draw_ms):.0f} ms; in all the page's own work took "
                f"{sum(self.update_ms) / 10 / page_wall_s:.0f} % of the page runs' wall time.")


def open_live_page(new_tokens: int, model: str | None = None):
    """The real app in Streamlit's AppTest: race off, real-time pace, the default model unless
    `model` names another (tests use a tiny one)."""
    from streamlit.testing.v1 import AppTest
    for name in ("KVVIZ_MODEL", "KVVIZ_PRESENT", "KVVIZ_HOSTED"):
        os.environ.pop(name, None)  # the default model, the normal layout, no hosted limits
    if model is not None:
        os.environ["KVVIZ_MODEL"] = model
    at = AppTest.from_file(str(APP), default_timeout=600)
    at.run()
    check_page(at)
    at.slider(key="max_new").set_value(new_tokens)
    at.toggle(key="race").set_value(False)
    return at


def check_page(at) -> None:
    if at.exception or at.error:
        raise RuntimeError(f"the live page failed: {[e.value for e in (*at.exception, *at.error)]}")


def wait_without_polling(runner, timeout: float = 3) -> None:
    """Stands in for AppTest's `require_widgets_deltas`, which polls the script runner every
    millisecond from the main thread; on 2 cores that polling alone slows the page's thread by
    10-20 %, a cost a served page (an idle event loop) does not have. This blocks instead."""
    runner._script_thread.join(timeout)
    if runner._script_thread.is_alive():
        runner.request_stop()
        runner.join()
        raise RuntimeError(f"the live page did not finish within {timeout:.0f} s")


def page_tokens_per_s(at, spy: GenerateSpy) -> float:
    """Click Generate on the live page; tokens/s over the spy's window."""
    from streamlit.testing.v1 import local_script_runner
    polling = local_script_runner.require_widgets_deltas
    local_script_runner.require_widgets_deltas = wait_without_polling
    try:
        at.button(key="generate").click().run()
    finally:
        local_script_runner.require_widgets_deltas = polling
    check_page(at)
    return spy.tokens / spy.wall_s


def headless_tokens_per_s(spy: GenerateSpy) -> float:
    """The same run (model, config, timing window) with the events only appended to a Trace,
    in a fresh thread as Streamlit runs each script run in a fresh thread."""
    from kvviz.core.trace import Trace

    def consume():
        trace = Trace({}, [])
        for event in spy.timed(spy.real(spy.lm, spy.cfg, "cached")):
            trace.append(event)

    in_fresh_thread(consume)
    return spy.tokens / spy.wall_s


def in_fresh_thread(work: Callable[[], object]) -> None:
    failure = []
    thread = threading.Thread(target=lambda: catch(work, failure), name="kvviz-bench-headless")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def catch(work: Callable[[], object], failure: list) -> None:
    try:
        work()
    except BaseException as exc:  # re-raised in the calling thread
        failure.append(exc)


def chart_interval_s() -> float:
    from kvviz.live.cadence import CHART_INTERVAL_S
    return CHART_INTERVAL_S


def live_page_in_subprocess(s: Settings, threads: int | None) -> tuple[list[Result], str]:
    """`live_page_vs_headless` in a fresh process whose main thread never runs torch.

    With GNU OpenMP, once one thread has run a parallel torch op its worker pool stays alive,
    and any other thread's ops then find more OpenMP threads than cores and stop spinning
    between ops, which slowed decode steps in Streamlit's script thread by up to 2× on 2 cores
    (measured once, when this benchmark ran after the others in one process). A served page
    never runs torch on the server's main thread, so neither may this measurement.
    """
    out = run_json("bench.apptest_page", json.dumps(dataclasses.asdict(s)), json.dumps(threads),
                   what="the AppTest live page benchmark")
    return [Result(**row) for row in out["rows"]], out["method"]


def live_page_vs_headless(s: Settings, model: str | None = None) -> tuple[list[Result], str]:
    with GenerateSpy() as spy, PageClock() as clock:
        at = open_live_page(s.new_tokens, model)
        page_tokens_per_s(at, spy)  # warm-up run; also tells the spy which model and config
        clock.reset()
        samples = interleaved({"page": lambda: page_tokens_per_s(at, spy),
                               "headless": lambda: headless_tokens_per_s(spy)}, s.reps)
    m = medians(samples)
    page_wall_s = sum(s.new_tokens / tps for tps in samples["page"])
    row = Result("Live page in AppTest (a harness: no server, no browser) / headless, wall-clock "
                 "tokens/s", f"{m['page']:.2f} tok/s", f"{m['headless']:.2f} tok/s",
                 m["page"] / m["headless"], None, None)
    return [row], (
        "The real app (`app.py`, the Live page) runs in Streamlit's `AppTest`: "
        f"{s.new_tokens} max new tokens, race off, real-time pace, then **Generate** is clicked; "
        f"one warm-up click, then {s.reps} page runs interleaved with {s.reps} headless runs. "
        "`kvviz.engine.loop.generate` is wrapped so that a clock starts when the page asks for the first "
        "event and stops when it asks for the one after the last: the window holds every step "
        "plus everything `run_panel.run_live` does per event — the streamed text rewritten every "
        f"token, and the metrics, captions and Altair charts redrawn at most every "
        f"{chart_interval_s()} s. The headless variant consumes the very same generator "
        "(same model object, same config, EOS ignored in both) and only appends to a Trace; it "
        "too runs in a fresh thread per run, as Streamlit runs every script run. The whole "
        "benchmark runs in a fresh process whose main thread never runs torch, like a Streamlit "
        "server: once any other thread of a process has run torch ops, GNU OpenMP finds more "
        "threads than cores and stops spinning between ops, which slows the page's steps. "
        "AppTest runs the page script in its own thread and builds every element's protobuf "
        "(Altair's Vega-Lite and Arrow data included) exactly as a served page does; it does not ship "
        "the messages over a websocket or render them, which a real server does on another "
        "thread (competing for the GIL and the 2 cores) and the browser elsewhere, so this is a "
        "lower bound on a served page's cost (the row is informational; the targets are on the "
        "browser rows). AppTest's own wait loop, which polls the script every millisecond from "
        "the main thread, is replaced for these clicks by a blocking join "
        "(`wait_without_polling`). "
        "Page setup before the first event and the final "
        "redraw after the last are one-off costs outside the window. "
        f"Page: {spread(samples['page'])} tok/s; headless: {spread(samples['headless'])} tok/s. "
        + clock.notes(s.reps, page_wall_s))


def main(argv: list[str]) -> None:
    """The subprocess side: `python -m bench.apptest_page SETTINGS_JSON THREADS_JSON`."""
    import torch
    settings, threads = json.loads(argv[0]), json.loads(argv[1])
    if threads:
        torch.set_num_threads(threads)
    settings["recompute_lengths"] = tuple(settings["recompute_lengths"])
    rows, method = live_page_vs_headless(Settings(**settings))
    print(json.dumps({"rows": [dataclasses.asdict(r) for r in rows], "method": method}))


if __name__ == "__main__":
    main(sys.argv[1:])
