"""When each part of the Live page may draw again (kvviz.live.cadence). Pure: a fake clock."""
import pytest

from kvviz.live import cadence


def test_each_part_of_the_page_waits_its_gap_and_its_share_of_the_wall_clock(monkeypatch):
    """A part that took c seconds to draw may draw again after max(shortest gap, c / share),
    never later than its longest gap."""
    clock = {"t": 100.0}
    monkeypatch.setattr(cadence.time, "monotonic", lambda: clock["t"])
    parts = cadence.Cadence({"charts": (0.5, 0.05, 2.0)})
    assert parts.due("charts", 100.0)
    for cost, gap in ((0.01, 0.5), (0.04, 0.8), (0.5, 2.0)):  # cheap: the shortest gap; costly: its share; capped
        start = clock["t"]
        with parts.drawing("charts"):
            clock["t"] += cost
        assert not parts.due("charts", start + gap - 0.001) and parts.due("charts", start + gap + 1e-9)
        clock["t"] = start + gap + 1e-9
    assert parts.frames["charts"] == 3 and parts.spent_s["charts"] == pytest.approx(0.55)
