"""The layout probe runs once per model (kvviz.engine.loop.probed_layout): a run's click does not
wait for three more forwards, and what later runs plan is what the first probe measured."""
from __future__ import annotations

import dataclasses
import functools

from kvviz.core.config import RunConfig
from kvviz.engine import layout_probe
from kvviz.engine import loop as engine
from tiny import tiny_lm


def counted_forwards(lm) -> list:
    calls = []
    inner = lm.model.forward

    @functools.wraps(inner)  # its signature: kvviz reads whether it takes a cache
    def forward(*args, **kwargs):
        calls.append(1)
        return inner(*args, **kwargs)
    lm.model.forward = forward
    return calls


def test_the_second_plan_of_a_model_runs_no_forward_and_plans_the_same_layout():
    lm = tiny_lm("llama")
    calls = counted_forwards(lm)
    first = engine.run_meta(lm, RunConfig(prompts=("Hello there",), max_new_tokens=4))
    probed = len(calls)
    assert probed >= 3  # prefill, decode step, recompute: the probe ran
    second = engine.run_meta(lm, RunConfig(prompts=("What is a KV cache? Tell me a story.",), max_new_tokens=9))
    assert len(calls) == probed  # no forward: the first probe's layout
    assert second.layers == first.layers and second.bytes_per_token == first.bytes_per_token
    list(engine.generate(lm, RunConfig(prompts=("Hello",), max_new_tokens=3, stop_on_eos=False)))
    assert len(calls) == probed + 3  # the run's own three forwards, no probe before them


def test_another_model_of_the_same_config_is_probed_for_itself():
    one, two = tiny_lm("llama"), tiny_lm("llama")
    engine.run_meta(one, RunConfig())
    calls = counted_forwards(two)
    engine.run_meta(two, RunConfig())
    assert len(calls) >= 3


def test_a_failed_probe_is_tried_again_at_the_next_plan(monkeypatch):
    lm = tiny_lm("llama")
    specs, elem = (object(),), 4
    runs = []

    def failing():
        runs.append(1)
        raise RuntimeError("out of memory")
    for _ in range(2):
        probed = engine.probed_layout(lm.model, specs, elem, failing)
        assert "probe forward failed" in probed.note
    assert len(runs) == 2
    good = dataclasses.replace(layout_probe.Probed(specs), note="")
    monkeypatch.setattr(layout_probe, "measured_specs", lambda *a: good)
    assert engine.probed_layout(lm.model, specs, elem, failing) is good
    monkeypatch.setattr(layout_probe, "measured_specs", lambda *a: None)  # a second probe would return None
    assert engine.probed_layout(lm.model, specs, elem, failing) is good


def test_a_dropped_model_takes_its_probe_with_it():
    import gc
    import weakref
    lm = tiny_lm("llama")
    engine.run_meta(lm, RunConfig())
    alive = weakref.ref(lm.model)
    assert lm.model in engine._PROBED
    del lm
    gc.collect()
    assert alive() is None  # the memo keeps no model alive
