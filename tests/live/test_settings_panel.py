"""The Live page's sidebar settings (kvviz.live.settings_panel): pace names and the slow-motion
delay (pure; the sidebar itself is drawn in tests/live/test_panel.py and tests/app/test_stage.py)."""
from __future__ import annotations

import pytest

from kvviz.live import settings_panel


def test_a_pace_is_named_by_its_entry_and_an_unknown_one_is_real_time():
    assert [settings_panel.pace_name(v) for v in settings_panel.PACES.values()] == list(settings_panel.PACES)
    assert settings_panel.pace_name(7.0) == "Real time"
    assert settings_panel.LiveOptions() == settings_panel.LiveOptions(race=True, pace=1.0, show_tokens=False)


@pytest.mark.parametrize("step_ms, pace, slept", [(10.0, 4.0, [0.03]), (20.0, 30.0, [0.58]), (10.0, 1.0, [])])
def test_slow_motion_stretches_a_step_to_pace_times_its_measured_length(monkeypatch, step_ms, pace, slept):
    """The step already took step_ms: slow motion waits the rest, (pace - 1) × step_ms."""
    seen = []
    monkeypatch.setattr(settings_panel.time, "sleep", seen.append)
    settings_panel.pace_delay(step_ms, pace)
    assert seen == pytest.approx(slept)
