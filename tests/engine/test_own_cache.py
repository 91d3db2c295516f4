"""Issue 29's four architectures, beyond the model-type sweep: xLSTM and RWKV carry their state
through objects of their own (kvviz.engine.own_cache) and refuse the static backend in words; runs
of DeepSeek-V4 say what is sized from its code; the planner sizes a pasted config of each as a run
measures it. Tiny random models from the sweep's own configs (tests/engine/test_model_types.py).
DeepSeek-V4's compressor as the probe reads it: tests/engine/test_probe.py; CompressedSpec's
arithmetic: tests/core/test_spec.py."""
from __future__ import annotations

from functools import lru_cache

import pytest
import torch

from kvviz.core import layout
from kvviz.engine import loop as engine
from kvviz.engine.models import LoadedModel
from tests.engine.test_model_types import build, caveat_of, hf_tokens, run_config, sized_config
from tiny import tiny_tokenizer


@lru_cache(maxsize=None)
def tiny(model_type: str) -> LoadedModel:
    return LoadedModel(model=build(sized_config(model_type)), tokenizer=tiny_tokenizer(), name=model_type,
                       label=model_type,
                       device=torch.device("cpu"), dtype=torch.float32, load_s=0.0)


@pytest.mark.parametrize("model_type, per_sequence", [
    ("rwkv", 4 * (2 * 64 + 3 * 64) * 4),  # 4 layers × (2 shift + 3 WKV) × hidden 64 × fp32
    ("xlstm", 4 * 8 * (8 * 16 + 8 + 1) * 4)])  # 4 blocks × 8 heads × (C 8×16 + n 8 + m 1) × fp32
def test_greedy_with_state_equals_without_and_the_state_is_measured(model_type, per_sequence):
    """The loop carries the model's own state: greedy tokens with it == recomputing without it,
    and every step's bytes == the formula == the state's size (it does not grow)."""
    lm = tiny(model_type)
    cached = list(engine.generate(lm, run_config(), "cached"))
    recompute = list(engine.generate(lm, run_config(), "recompute"))
    assert [e.token_ids for e in cached] == [e.token_ids for e in recompute]
    assert all(e.kv_bytes == e.formula_bytes == 2 * per_sequence and not e.cache_note for e in cached)
    assert all(e.positions == 2 for e in cached[1:])  # decode steps feed one token per sequence


def test_rwkv_own_batched_step_is_wrong_and_kvviz_decodes_row_by_row():
    """Why the sweep compares RWKV with its own generate row by row (ROW_BY_ROW): its batched
    one-token step broadcasts its state across the batch; kvviz's run equals the row-by-row one
    and its own no-cache generate."""
    lm = tiny("rwkv")
    rows, batched = hf_tokens(lm, rows=True), hf_tokens(lm)
    assert batched != rows
    assert [e.token_ids for e in engine.generate(lm, run_config(),
                                                 "cached")] == rows == hf_tokens(lm, use_cache=False)
    assert "kvviz decodes a batch sequence by sequence" in caveat_of(engine.run_meta(lm, run_config()))


def test_xlstm_and_rwkv_refuse_the_static_backend_in_words():
    from dataclasses import replace
    from kvviz.core.errors import UserError
    for model_type in ("xlstm", "rwkv"):
        with pytest.raises(UserError, match="object of its own"):
            list(engine.generate(tiny(model_type), replace(run_config(), cache_backend="static"), "cached"))


def test_deepseek_v4_runs_say_what_is_sized_from_its_code():
    caveat = caveat_of(engine.run_meta(tiny("deepseek_v4"), run_config()))
    assert "4 of its layers compress their past (÷4, ÷128)" in caveat and "sized from its code" in caveat


def test_a_pasted_config_of_each_plans_its_layers():
    """The planner reads the same layout: RWKV and xLSTM as fixed states of the run's size,
    DeepSeek-V4's compressed layers and MiniMax-M3's indexer keys as the run measures them."""
    from kvviz.planner import capacity
    from kvviz.planner import frames as planner_frames
    states = {}
    for model_type in ("rwkv", "xlstm", "deepseek_v4", "minimax_m3_vl_text"):
        model = planner_frames.model_from_pasted_config(sized_config(model_type).to_json_string())
        states[model_type] = capacity.state_bytes_per_request(model, "fp32")
        run = engine.plan_run(tiny(model_type), run_config()).specs
        assert [s.values_per_token for s in model.specs] == [s.values_per_token for s in run], model_type
        assert [s.index_values for s in model.specs] == [s.index_values for s in run], model_type
    assert states["rwkv"] == 4 * 5 * 64 * 4 and states["xlstm"] == 4 * 8 * (8 * 16 + 8 + 1) * 4
    assert states["deepseek_v4"] == states["minimax_m3_vl_text"] == 0


def test_the_planner_counts_deepseek_v4s_compressed_entries_at_long_context():
    """DeepSeek-V4 at its defaults (23 HCA and 20 CSA layers, window 128) in bf16 at 131,072 tokens:
    the planner's bytes == the layers' formula, 868,774,912 B a sequence, of which the windows are
    5,592,064 B (what a sliding-window-only count would give)."""
    from dataclasses import replace
    from transformers import AutoConfig
    from kvviz.planner import capacity
    specs = layout.layer_specs(AutoConfig.for_model("deepseek_v4"))
    model = replace(capacity.uniform_model(1, 1, 64), specs=specs)  # the planner's arithmetic on its layout
    assert capacity.kv_bytes_for_context(model, 131_072, "bf16") == sum(s.bytes_at(131_072, 2) for s in specs)
    assert sum(s.bytes_at(131_072, 2) for s in specs) == 868_774_912
    assert sum(s.values_per_token * s.tokens_held(131_072) for s in specs) * 2 == 5_592_064


def test_only_rwkv_and_xlstm_get_a_cache_object_of_their_own():
    """`make` gives RWKV a StateList and xLSTM its xLSTMCache; any other model a transformers Cache
    (None here), whose layers `layer_states` leaves to the probe; a StateList's layers are the
    state's slices along its last axis."""
    from kvviz.engine import own_cache
    from tiny import tiny_model
    llama = tiny_model("llama")
    assert own_cache.make(llama, 2) is None and not own_cache.keeps_state(llama)
    assert own_cache.inputs(None) == {} and own_cache.layer_states(object(), 2) is None
    rwkv = own_cache.make(tiny("rwkv").model, 2)
    assert isinstance(rwkv, own_cache.StateList) and own_cache.inputs(rwkv) == {}  # before the prefill
    rwkv.state = [torch.zeros(2, 64, 4), torch.ones(2, 64, 4)]
    layers = own_cache.layer_states(rwkv, 4)
    assert len(layers) == 4 and [t.shape for t in layers[3]] == [(2, 64)] * 2 and layers[3][1].sum() == 2 * 64
    xlstm = own_cache.make(tiny("xlstm").model, 2)
    assert type(xlstm).__name__ == "xLSTMCache" and own_cache.inputs(xlstm) == {"cache": xlstm}
