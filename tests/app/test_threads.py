"""Torch's thread policy in the dashboard's server (kvviz.app.threads): all cores but one unless
`KVVIZ_TORCH_THREADS` says otherwise, a bad setting refused in words, and the setting reaching the
threads Streamlit starts later."""
import threading

import pytest
import torch

from kvviz.app import threads
from kvviz.app.threads import torch_threads
from kvviz.core.errors import UserError


@pytest.mark.parametrize("cores, default, env, expected", [
    (2, 2, {}, 1), (1, 1, {}, 1), (4, 4, {}, 3), (16, 8, {}, 8),  # all cores but one, ≤ torch's
    (2, 2, {"KVVIZ_TORCH_THREADS": "2"}, 2), (2, 2, {"KVVIZ_TORCH_THREADS": "0"}, 2),
    (8, 8, {"KVVIZ_TORCH_THREADS": " 3 "}, 3),
])
def test_torch_thread_policy(cores, default, env, expected):
    assert torch_threads(cores, default, env) == expected


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_torch_thread_setting_must_be_a_whole_number(value):
    with pytest.raises(UserError, match="KVVIZ_TORCH_THREADS"):
        torch_threads(2, 2, {"KVVIZ_TORCH_THREADS": value})


def test_thread_policy_reaches_threads_started_later(monkeypatch):
    """Streamlit runs every script run on a fresh thread: the setting must reach them."""
    before = torch.get_num_threads()
    monkeypatch.setenv("KVVIZ_TORCH_THREADS", "1")
    seen = []
    try:
        setter = threading.Thread(target=threads.apply_torch_threads)
        setter.start()
        setter.join()
        reader = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        reader.start()
        reader.join()
    finally:
        torch.set_num_threads(before)
    assert seen == [1]


def test_the_server_hands_the_interpreter_over_within_the_switch_interval():
    """The live page's model thread waits for the drawing thread at most SWITCH_INTERVAL_S (not
    Python's 5 ms) each time an operation returns; configure_server sets it, as app.py runs it."""
    import sys

    from streamlit.testing.v1 import AppTest
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        at = AppTest.from_string("from kvviz.app import ui\nui.configure_server()").run(timeout=60)
        assert not at.exception and threads.SWITCH_INTERVAL_S < 0.005
        assert sys.getswitchinterval() == pytest.approx(threads.SWITCH_INTERVAL_S)
    finally:
        sys.setswitchinterval(before)
