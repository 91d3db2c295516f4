"""The device queue: one holder, first come first served, leaving the line works."""
import threading
import time

from kvviz.app.device_queue import DeviceQueue


def test_fifo_positions_and_single_holder():
    q, a, b, c = DeviceQueue(), object(), object(), object()
    for t in (a, b, c):
        q.join(t)
    assert [q.position(t) for t in (a, b, c)] == [1, 2, 3]
    assert not q.try_take(b) and q.try_take(a)
    assert q.position(a) == 0 and q.position(b) == 1
    assert not q.try_take(b)  # a holds it
    q.release(b)  # b gives up waiting
    assert q.position(c) == 1
    q.release(a)
    assert q.try_take(c) and q.num_waiting == 0


def test_threads_never_overlap():
    q, inside, overlaps = DeviceQueue(), [], []

    def worker():
        ticket = object()
        q.join(ticket)
        while not q.try_take(ticket):
            time.sleep(0.001)
        inside.append(ticket)
        if len(inside) > 1:
            overlaps.append(True)
        time.sleep(0.005)
        inside.remove(ticket)
        q.release(ticket)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert not overlaps and not inside and q.num_waiting == 0
