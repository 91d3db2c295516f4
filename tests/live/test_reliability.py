"""Failures midway: an injected out-of-memory error ends the run cleanly and the next run works."""
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from kvviz.engine import loop as engine

pytestmark = pytest.mark.slow  # runs the Live page (Streamlit AppTest) through failures: make test, not make check

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def test_out_of_memory_midway_keeps_output_and_next_run_works(monkeypatch, tiny_dir):
    monkeypatch.setenv("KVVIZ_MODEL", str(tiny_dir))
    real_step, calls, freed = engine.run_step, [], []

    def failing_step(*args, **kwargs):  # every forward pass of a run, cached or recompute
        calls.append(1)
        if len(calls) == 5:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_step(*args, **kwargs)

    real_free = engine.free_device_memory
    monkeypatch.setattr(engine, "run_step", failing_step)
    monkeypatch.setattr(engine, "free_device_memory", lambda d: (freed.append(d), real_free(d)))
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.slider(key="max_new").set_value(8).run()
    at.button(key="generate").click().run()
    assert not at.exception
    assert any("ran out of memory" in e.value and "released" in e.value for e in at.error)
    assert freed, "memory was not released"
    kept = at.session_state["trace"].events_of("cached")  # what was produced before the failure
    assert kept and {m.label: m.value for m in reversed(at.metric)}["Tokens"] == f"{len(kept)} × 1"
    monkeypatch.setattr(engine, "run_step", real_step)
    at.button(key="generate").click().run()
    assert not at.exception and not at.error
    assert {m.label: m.value for m in reversed(at.metric)}["Tokens"] == "8 × 1"


def test_hooks_are_removed_after_a_failed_run(monkeypatch):
    from tiny import tiny_lm
    from kvviz.core.config import RunConfig
    lm = tiny_lm()

    def boom(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(engine, "run_step", boom)
    with pytest.raises(RuntimeError, match="out of memory"):
        list(engine.generate(lm, RunConfig(max_new_tokens=3)))
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in lm.model.model.layers)


def test_error_messages_quoting_user_text_render_inert(monkeypatch):
    """A model name from a shared link is quoted in the error, with its Markdown escaped."""
    monkeypatch.setenv("KVVIZ_MODEL", "./[click me](https://example.invalid) **now** :material/home:")
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    (error,) = at.error
    assert "\\[click me\\]\\(https\\:\u2060//example\\.invalid\\)" in error.value  # no link, bare or not
    assert "\\*\\*now\\*\\*" in error.value and "\\:material/home\\:" in error.value


def test_inert_escapes_every_markdown_special():
    from kvviz.app.ui import inert
    assert inert("a*b_c`d[e](f)#g<h>i|j~k$l!m:n") == "a\\*b\\_c\\`d\\[e\\]\\(f\\)\\#g\\<h\\>i\\|j\\~k\\$l\\!m\\:n"
