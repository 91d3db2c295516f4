"""The peak memory of a run (kvviz.shrink.peak): the bytes of the tensors a step allocates, counted
while they live, on CPU tensors of known sizes (fp32: 4 bytes a value)."""
import torch

from kvviz.shrink import peak


def test_a_step_counts_what_it_allocates_until_it_is_freed():
    tracker = peak.PeakTracker()
    before = torch.ones(1000)  # allocated before the step: never counted
    with tracker.step(torch.device("cpu")) as out:
        a = before * 2  # 4,000 B
        b = a + 1  # 8,000 B alive at once
        del a  # 4,000 B left
    assert out == {"peak_bytes": 8000} and tracker.now == 4000
    with tracker.step(torch.device("cpu")) as second:
        c = torch.zeros(500)  # 2,000 B over the 4,000 still alive from the first step
    assert second["peak_bytes"] == 6000
    del b, c
    assert tracker.now == 0 and not tracker.live


def test_a_view_shares_its_storage_and_is_counted_once():
    tracker = peak.PeakTracker()
    with tracker.step(torch.device("cpu")) as out:
        x = torch.ones(256)  # 1,024 B
        views = [x[:128], x.view(16, 16), x.reshape(256)]  # the same storage
    assert out["peak_bytes"] == 1024 and len(tracker.live) == 1
    del x, views
    assert tracker.now == 0
