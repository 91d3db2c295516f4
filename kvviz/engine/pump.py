"""Generation on a worker thread, so drawing never holds back the model and every wait is visible.

`Pump.start` runs an iterator of events on a worker thread and hands them over through a queue.
The script thread `take`s whatever has arrived (waiting at most a tick), so it redraws at a fixed
rate from the latest state, and between events it can read `running` (which run, which step,
since when) to draw a long prefill's progress. The model calls stay on one thread at a time: the
worker is the only one that advances the generators until `stop` has joined it.
"""
from __future__ import annotations

import itertools
import queue
import threading
import time
from dataclasses import dataclass
from typing import Iterable, Iterator


@dataclass(frozen=True)
class Running:
    """The forward pass in progress: its run ("cached" / "recompute"), step and start."""

    mode: str
    step: int
    started_s: float  # time.monotonic() when it began

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started_s


class Pump:
    def __init__(self) -> None:
        self.arrived: queue.Queue = queue.Queue()
        self.stopping = threading.Event()
        self.finished = threading.Event()
        self.running: Running | None = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def tracked(self, events: Iterable, mode: str) -> Iterator:
        """`events`, noting in `running` each step of run `mode` while it is computed."""
        events = iter(events)
        for step in itertools.count():
            self.running = Running(mode, step, time.monotonic())
            event = next(events, None)
            if event is None:
                return
            yield event

    def start(self, events: Iterable) -> None:
        self.thread = threading.Thread(target=self._work, args=(events,), name="kvviz-generate", daemon=True)
        self.thread.start()

    def _work(self, events: Iterable) -> None:
        try:
            for event in events:
                self.arrived.put(event)
                if self.stopping.is_set():
                    break
        except BaseException as exc:  # handed to the script thread by `take`
            self.error = exc
        finally:
            self.running = None
            self.finished.set()

    def take(self, wait_s: float) -> list:
        """The events arrived since the last call, waiting up to `wait_s` for a first one.

        Raises the worker's exception once every event it produced has been taken.
        """
        try:
            taken = [self.arrived.get(timeout=wait_s)]
        except queue.Empty:
            taken = []
        while True:
            try:
                taken.append(self.arrived.get_nowait())
            except queue.Empty:
                break
        if not taken and self.finished.is_set() and self.error is not None:
            error, self.error = self.error, None
            raise error
        return taken

    def done(self) -> bool:
        """The worker has ended and every event was taken."""
        return self.finished.is_set() and self.arrived.empty() and self.error is None

    def stop(self) -> None:
        """Ask the worker to end after the step in progress, and wait for it."""
        self.stopping.set()
        if self.thread is not None:
            self.thread.join()
