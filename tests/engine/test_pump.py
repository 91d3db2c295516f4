"""Generation on a worker thread: events arrive in order, long steps are visible, errors surface."""
import time

import pytest

from kvviz.engine.pump import Pump


def slow(n, step_s):
    for i in range(n):
        time.sleep(step_s)
        yield i


def drain(pump, limit_s=10.0):
    out, deadline = [], time.monotonic() + limit_s
    while not pump.done() and time.monotonic() < deadline:
        out += pump.take(0.05)
    return out


def test_events_arrive_in_order_and_the_running_step_is_known():
    pump = Pump()
    pump.start(pump.tracked(slow(3, 0.2), "recompute"))
    time.sleep(0.1)
    running = pump.running
    assert running.mode == "recompute" and running.step == 0 and 0.05 < running.elapsed_s() < 0.2
    assert drain(pump) == [0, 1, 2]
    pump.stop()
    assert pump.running is None


def test_stop_ends_the_worker_after_its_step():
    pump = Pump()
    pump.start(pump.tracked(slow(100, 0.05), "cached"))
    time.sleep(0.12)
    pump.stop()
    assert not pump.thread.is_alive() and len(pump.take(0.01)) < 10


def test_the_worker_error_is_raised_after_its_events():
    def failing():
        yield 1
        raise MemoryError("out of memory")
    pump = Pump()
    pump.start(failing())
    time.sleep(0.1)
    assert pump.take(0.1) == [1]
    with pytest.raises(MemoryError):
        pump.take(0.1)
