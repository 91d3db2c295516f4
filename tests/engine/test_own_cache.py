"""Issue 29's four architectures, beyond the model-type sweep: xLSTM and RWKV carry their state
through objects of their own (kvviz.engine.own_cache), DeepSeek-V4's compressor and MiniMax-M3's
indexer keys are sized from their code (kvviz.core.spec.CompressedSpec, layout's index values).
Tiny random models from the sweep's own configs (tests/engine/test_model_types.py)."""
from __future__ import annotations

from functools import lru_cache

import pytest
import torch
from transformers import DynamicCache

from kvviz.core import layout
from kvviz.engine import loop as engine
from kvviz.engine import probe
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


def compressed_config(dtype_rates=(4, 8)):
    """DeepSeek-V4 with one sliding, one CSA and two HCA layers, rates small enough to close windows."""
    csa, hca = dtype_rates
    from transformers import AutoConfig
    base = sized_config("deepseek_v4").to_dict()
    base.update(layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                             "heavily_compressed_attention"], compress_rates={"compressed_sparse_attention": csa,
                                                                               "heavily_compressed_attention": hca},
                sliding_window=6, head_dim=32, index_head_dim=16, q_lora_rank=32, o_lora_rank=16, index_n_heads=2)
    base.pop("model_type", None)
    return AutoConfig.for_model("deepseek_v4",
                                **{k: v for k, v in base.items() if k not in ("transformers_version",)})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_deepseek_v4_compressor_sized_from_its_code_at_every_length(dtype):
    """Fed 1 token at a time past two CSA and one HCA window and the sliding window, every layer's
    bytes (window K = V, compressed entries, buffered projections and gates, overlap halves) ==
    CompressedSpec.bytes_at, in fp32 and bf16; the keys are counted once (values is keys)."""
    config = compressed_config()
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_config(config).to(dtype).eval()
    specs = layout.layer_specs(config)
    assert [s.label() for s in specs] == ["sliding 6", "sliding 6 + compressed ÷4", "sliding 6 + compressed ÷8",
                                          "sliding 6 + compressed ÷8"]
    elem, cache, ids = torch.finfo(dtype).bits // 8, DynamicCache(config=model.config), torch.randint(3, 300, (2, 17))
    with torch.inference_mode():
        model(input_ids=ids[:, :3], cache=cache, use_cache=True)
        for n in range(4, 18):
            model(input_ids=ids[:, n - 1:n], cache=cache, use_cache=True)
            read = probe.read_cache(cache, len(specs))
            measured = [r.k_bytes + r.v_bytes + r.state_bytes + r.compressor_bytes for r in read]
            assert measured == [s.bytes_at(n, elem, 2) for s in specs], n
    assert read[1].v_bytes == 0 and read[1].compressor_bytes > 0


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


def test_a_compressed_layer_holds_its_window_and_its_entries_at_long_context():
    """At 131,072 tokens a CSA layer (rate 4, head_dim 512, index_head_dim 128, window 128) holds
    127 window tokens of 512 + 32,768 entries of 640 + its overlap halves (2 × 4 × 640); an HCA
    layer (rate 128) 127 × 512 + 1,024 entries of 512 (no tokens buffered at a multiple of 128)."""
    from kvviz.core.spec import CompressedSpec
    csa = CompressedSpec(kv_heads=1, values_per_token=512, key_values_per_token=512, token_cap=128, compress_rate=4,
                         compressed_values=640, buffer_values=2560, overlap_values=5120)
    hca = CompressedSpec(kv_heads=1, values_per_token=512, key_values_per_token=512, token_cap=128,
                         compress_rate=128, compressed_values=512, buffer_values=1024)
    assert csa.values_held(131_072) == 127 * 512 + 32_768 * 640 + 5120
    assert hca.values_held(131_072) == 127 * 512 + 1_024 * 512
    assert hca.values_held(131_073) == hca.values_held(131_072) + 1024  # one token buffered
    assert csa.bytes_at(131_072, 2, 3) == csa.values_held(131_072) * 2 * 3
    assert csa.on_file().label() == "sliding 128" and csa.label() == "sliding 128 + compressed ÷4"


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
