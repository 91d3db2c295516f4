"""What a long-running public server must not accumulate or fight over: conversion folders a killed
process left (removed at the server's first page), and the Live page's "Attention over the cache"
toggle, which builds the eager variant once from the loaded weights instead of swapping the one model
two visitors share; and the store itself (kvviz.app.model_store): a get never loads, a load
replaces, a failed load leaves nothing held."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.app import ui
from kvviz.app.model_store import ModelStore
from kvviz.engine import models

APP = str(Path(__file__).resolve().parents[2] / "app.py")  # the Live page is its default
HOLD_WORK = """
import fcntl, sys, time
from pathlib import Path
work = Path(sys.argv[1]) / ".convert-abc123"  # what models.conversion_work makes and holds
work.mkdir()
(work / "model.safetensors").write_bytes(b"x" * 1000)
lock = open(work.with_name(work.name + ".lock"), "w")
fcntl.flock(lock, fcntl.LOCK_EX)
print(work, flush=True)
time.sleep(120)
"""


def test_a_conversion_holds_its_folder_while_it_runs(tmp_path):
    later = time.time() + models.LOCK_GRACE_S + 1
    with models.conversion_work(tmp_path) as work:
        assert work.name.startswith(".convert-") and models.remove_stale_work(tmp_path, now=later) == []
    assert list(tmp_path.iterdir()) == []  # done: the folder and its lock file gone


def test_a_killed_conversion_folder_is_removed_and_a_running_one_kept(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HOLD_WORK, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        work = Path(proc.stdout.readline().strip())  # the conversion is under way, its lock held
        later = time.time() + models.LOCK_GRACE_S + 1
        assert work.is_dir() and models.remove_stale_work(tmp_path, now=later) == []
        proc.send_signal(signal.SIGKILL)  # kill -9 mid-conversion: no cleanup runs
        proc.wait(timeout=20)
        assert work.is_dir()
        assert models.remove_stale_work(tmp_path, now=later) == [work]
        assert list(tmp_path.iterdir()) == []  # the folder and its lock file
    finally:
        proc.kill()
        proc.wait(timeout=20)


def test_the_first_page_of_a_server_removes_them(tmp_path, monkeypatch):
    monkeypatch.setenv("KVVIZ_CACHE_DIR", str(tmp_path))
    left = tmp_path / ".convert-killed"
    left.mkdir()
    models.lock_path(left).touch()  # a lock file nobody holds: its process is gone
    aged = time.time() - models.LOCK_GRACE_S - 5
    os.utime(left, (aged, aged))
    ui.stale_conversions_removed.clear()
    try:
        ui.configure_server()
        assert not left.exists() and ui.stale_conversions_removed() == (".convert-killed",)
    finally:
        ui.stale_conversions_removed.clear()


@pytest.fixture
def loads(tiny_dir, monkeypatch):
    """Every model load from disk, counted; the tiny Llama is the host's model."""
    monkeypatch.setenv("KVVIZ_MODEL", str(tiny_dir))
    ui.model_store.clear()
    counted = []
    real = models.load_model

    def counting(load_config, *args, **kwargs):
        counted.append(load_config.attn_implementation)
        return real(load_config, *args, **kwargs)

    monkeypatch.setattr(models, "load_model", counting)
    yield counted
    ui.model_store.clear()


@pytest.mark.slow
def test_two_visitors_alternating_the_attention_toggle_load_the_model_once(loads, tiny_dir):
    plain, eager = AppTest.from_file(APP, default_timeout=120), AppTest.from_file(APP, default_timeout=120)
    plain.run()
    eager.run()
    eager.toggle(key="attention").set_value(True).run()
    for _ in range(3):  # they take turns: the page reruns for each
        plain.run()
        eager.run()
    assert not plain.exception and not eager.exception
    assert loads == ["sdpa"]  # one load from disk; the eager variant was built from it
    store = ui.model_store()
    sdpa_lm = store.get(ui.LoadConfig(name=str(tiny_dir)))
    eager_lm = store.get(ui.LoadConfig(name=str(tiny_dir), attn_implementation="eager"))
    assert sdpa_lm.model.config._attn_implementation == "sdpa"
    assert eager_lm.model.config._attn_implementation == "eager"
    assert [p.data_ptr() for p in eager_lm.model.parameters()] == [p.data_ptr() for p in sdpa_lm.model.parameters()]
    eager.slider(key="max_new").set_value(4)
    eager.button(key="generate").click().run()  # the cache map's run on the variant
    assert not eager.exception and not eager.error, [e.value for e in eager.error]
    assert eager.session_state["trace"].meta.attn_implementation == "eager"
    assert loads == ["sdpa"]


# ---- the store: loads never replace a model under a run ------------------------------------

def test_model_store_get_never_loads_and_load_replaces():
    store, loads = ModelStore(), []
    assert store.get("a") is None
    assert store.load("a", lambda: loads.append("a") or "A") == "A"
    assert store.load("a", lambda: loads.append("again") or "X") == "A"  # already loaded
    assert store.get("a") == "A" and store.get("b") is None
    assert store.load("b", lambda: loads.append("b") or "B") == "B"
    assert store.get("a") is None and loads == ["a", "b"] and store.num_loads == 2


def test_a_failed_load_leaves_nothing_held():
    store = ModelStore()
    store.load("a", lambda: "A")

    def fail():
        raise RuntimeError("no such model")

    with pytest.raises(RuntimeError):
        store.load("b", fail)
    assert store.get("a") is None and store.get("b") is None and store.loaded_key is None
