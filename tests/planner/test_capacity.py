"""kvviz.planner.capacity against worked examples computed by hand (the arithmetic is in the comments).

Models are kvviz.core.layout's per-layer specs (via kvviz.planner.configs for catalog entries, or
capacity.uniform_model for explicit numbers).
"""
from __future__ import annotations

import json

import pytest

from kvviz.core import assets
from kvviz.core.errors import UserError
from kvviz.planner import capacity
from kvviz.planner import configs as plan_models
from kvviz.core.layout import FULL, SLIDING, STATE, CacheSpec

GB = 10**9
LLAMA_8B = capacity.uniform_model(32, 8, 128, 32, "Llama-3.1-8B", params_total=8_030_261_248)


def smollm2() -> capacity.ModelKV:
    return plan_models.catalog_model("SmolLM2-135M")


# ---------------------------------------------------------------- bytes per token, per layer kind

# Each by hand from the published config: attention 2 × kv_heads × head_dim × 2 B (bf16) per
# layer, latent (kv_lora_rank + qk_rope_head_dim) × 2 B, state layers 0 per token.
EXPECTED_BYTES_PER_TOKEN = {
    "SmolLM2-135M": {"full": 30 * 2 * 3 * 64 * 2},  # 23,040 (DESIGN.md, measured)
    "Llama-3.1-8B": {"full": 32 * 2 * 8 * 128 * 2},  # 131,072
    "Llama-3.1-70B": {"full": 80 * 2 * 8 * 128 * 2},  # 327,680
    "Gemma-2-9B": {"sliding": 21 * 2 * 8 * 256 * 2, "full": 21 * 2 * 8 * 256 * 2},
    "Gemma-3-1B": {"sliding": 22 * 2 * 1 * 256 * 2, "full": 4 * 2 * 1 * 256 * 2},  # 5:1, 26 layers
    "Mistral-7B-v0.1": {"sliding": 32 * 2 * 8 * 128 * 2},
    "DeepSeek-V3": {"latent": 61 * (512 + 64) * 2},  # 70,272
    "Kimi-K2": {"latent": 61 * (512 + 64) * 2},
    "Llama-4-Scout": {"chunked": 36 * 2 * 8 * 128 * 2, "full": 12 * 2 * 8 * 128 * 2},
    "Qwen3-Next-80B-A3B": {"state": 0, "full": 12 * 2 * 2 * 256 * 2},  # 1 full every 4 layers
    "Qwen3-30B-A3B": {"full": 48 * 2 * 4 * 128 * 2},
    "GPT-2": {"full": 12 * 2 * 12 * 64 * 2},
}


@pytest.mark.parametrize("name", sorted(EXPECTED_BYTES_PER_TOKEN))
def test_bytes_per_token_per_layer_kind_by_hand(name):
    model = plan_models.catalog_model(name)
    assert capacity.layer_kind_bytes_per_token(model, "bf16") == EXPECTED_BYTES_PER_TOKEN[name]
    assert capacity.kv_bytes_per_token(model) == sum(EXPECTED_BYTES_PER_TOKEN[name].values())


def test_smollm2_bytes_per_token_in_each_dtype():
    assert capacity.kv_bytes_per_token(smollm2(), "bf16") == 23_040
    assert capacity.kv_bytes_per_token(smollm2(), "fp32") == 46_080  # measured, DESIGN.md
    assert capacity.kv_bytes_per_token(smollm2(), "fp8") == 11_520
    # int4: 11,520 × 0.5 + 11,520 / 64 groups × 4 B = 5,760 + 720; int8: 11,520 + 720
    assert capacity.kv_bytes_per_token(smollm2(), "int4") == 6_480
    assert capacity.kv_bytes_per_token(smollm2(), "int8") == 12_240
    assert capacity.kv_bytes_for_context(smollm2(), 2_000, "int4") == 12_960_000


def test_llama_8b_bytes_for_context_and_batch():
    assert capacity.kv_bytes_per_token(LLAMA_8B) == 131_072
    assert capacity.kv_bytes_for_context(LLAMA_8B, 8_000) == 1_048_576_000
    assert capacity.kv_bytes_for_context(LLAMA_8B, 8_000, batch=4) == 4_194_304_000


def test_sliding_layers_hold_their_window():
    # Mistral-7B-v0.1: window 4,096 on all 32 layers; transformers keeps W − 1 = 4,095 tokens
    mistral = plan_models.catalog_model("Mistral-7B-v0.1")
    assert capacity.kv_bytes_for_context(mistral, 3_000) == 131_072 * 3_000
    assert capacity.kv_bytes_for_context(mistral, 8_000) == 131_072 * 4_095
    # Gemma-2-9B at 8,000: 21 full × 8,000 + 21 sliding × 4,095 layer-tokens × 8,192 B
    gemma = plan_models.catalog_model("Gemma-2-9B")
    assert capacity.kv_bytes_for_context(gemma, 8_000) == (21 * 8_000 + 21 * 4_095) * 8_192


def test_state_bytes_are_per_request_not_per_token():
    # Qwen3-Next: 36 Gated DeltaNet layers, each conv (2 × 16 × 128 + 32 × 128) × 4 = 32,768
    # values × 2 B + a float32 state 32 × 128 × 128 × 4 B = 2,097,152 B → 2,162,688 B per layer
    qwen = plan_models.catalog_model("Qwen3-Next-80B-A3B")
    assert capacity.state_bytes_per_request(qwen) == 36 * 2_162_688
    per_token = 12 * 2 * 2 * 256 * 2
    assert capacity.kv_bytes_for_context(qwen, 1000) == per_token * 1000 + 36 * 2_162_688
    assert capacity.kv_bytes_for_context(qwen, 0) == 0


def test_attention_kind_and_heads():
    assert LLAMA_8B.attention_kind == "GQA" and LLAMA_8B.kv_heads == 8 and LLAMA_8B.head_dim == 128
    assert plan_models.catalog_model("GPT-2").attention_kind == "MHA"
    assert plan_models.catalog_model("DeepSeek-V3").attention_kind == "MLA"
    assert capacity.uniform_model(4, 1, 64, 8).attention_kind == "MQA"
    only_state = capacity.ModelKV(name="s", specs=(CacheSpec(kind=STATE, state_values=10),), num_attention_heads=1)
    assert only_state.attention_kind == "no attention" and only_state.kv_heads == 0


# ---------------------------------------------------------------- what-ifs


def test_what_if_attention():
    assert capacity.kv_bytes_per_token(capacity.what_if_attention(LLAMA_8B, "mha")) == 524_288
    assert capacity.kv_bytes_per_token(capacity.what_if_attention(LLAMA_8B, "MQA")) == 16_384
    assert capacity.what_if_attention(LLAMA_8B, "gqa") == LLAMA_8B
    with pytest.raises(UserError, match="variant"):
        capacity.what_if_attention(LLAMA_8B, "mla")
    deepseek = plan_models.catalog_model("DeepSeek-V3")  # latent layers are left as they are
    assert capacity.what_if_attention(deepseek, "mha").specs == deepseek.specs


def test_what_if_window():
    windowed = capacity.what_if_window(LLAMA_8B, 1024)
    assert windowed.windowed_layers == 32
    assert capacity.kv_bytes_for_context(windowed, 8_000) == 131_072 * 1_023
    unwindowed = capacity.what_if_window(plan_models.catalog_model("Mistral-7B-v0.1"), None)
    assert capacity.kv_bytes_for_context(unwindowed, 8_000) == 1_048_576_000
    with pytest.raises(UserError, match="window"):
        capacity.what_if_window(LLAMA_8B, 0)


# ---------------------------------------------------------------- dtypes and weights


def test_bytes_per_element_including_scale_overhead():
    assert capacity.kv_bytes_per_element("fp32") == 4
    assert capacity.kv_bytes_per_element("bfloat16") == 2
    assert capacity.kv_bytes_per_element("torch.float16") == 2
    assert capacity.kv_bytes_per_element("fp8") == 1
    assert capacity.kv_bytes_per_element("int8") == 1.0625  # + 4 B per 64 values
    assert capacity.kv_bytes_per_element("int4") == 0.5625
    with pytest.raises(UserError, match="int3"):
        capacity.kv_bytes_per_element("int3")


def test_weight_bytes():
    assert capacity.weight_bytes(8_030_261_248, "bf16") == 16_060_522_496
    assert capacity.weight_bytes(10**9, "int4") == 562_500_000
    assert capacity.weight_bytes(0) == 0


# ---------------------------------------------------------------- concurrency


def test_llama_8b_concurrency_in_80_gb():
    # budget = 80e9 − 8e9 − 16,060,522,496 = 55,939,477,504 B
    weights = capacity.weight_bytes(LLAMA_8B.weight_params)
    assert capacity.kv_budget_bytes(80 * GB, weights) == 55_939_477_504
    fits = [capacity.max_concurrent_requests(LLAMA_8B, t, 80 * GB, weights) for t in (500, 2_000, 8_000)]
    assert fits == [853, 213, 53]


def test_concurrency_with_fixed_overhead_bytes():
    # 24e9 − 4e9 = 20e9; SmolLM2 at 2,000 tokens: 46,080,000 B → 434
    assert capacity.max_concurrent_requests(smollm2(), 2_000, 24 * GB, 0, overhead_bytes=4 * GB) == 434


def test_no_request_fits_when_weights_do_not():
    weights_70b = capacity.weight_bytes(70_553_706_496)
    model = plan_models.catalog_model("Llama-3.1-70B")
    assert capacity.kv_budget_bytes(80 * GB, weights_70b) == 0
    assert capacity.max_concurrent_requests(model, 500, 80 * GB, weights_70b) == 0
    with pytest.raises(UserError):
        capacity.max_concurrent_requests(model, 0, 80 * GB, 0)


def test_shared_prefix():
    # 1,000-token prompt shared by requests of 2,000 tokens, budget 1e9, Llama-8B 131,072 B/token:
    # (1e9 − 131,072,000) // 131,072,000 = 6 (vs 1e9 // 262,144,000 = 3)
    shared = capacity.shareable_prefix_bytes(LLAMA_8B, 1_000)
    assert shared == 131_072_000
    assert capacity.requests_with_shared_prefix(10**9, 262_144_000, shared) == 6
    assert capacity.requests_with_shared_prefix(10**8, 262_144_000, shared) == 0
    sliding = capacity.ModelKV(name="w", specs=(CacheSpec(kind=SLIDING, kv_heads=1, values_per_token=2, token_cap=8),
                                     CacheSpec(kind=FULL, kv_heads=1, values_per_token=2)), num_attention_heads=1)
    assert capacity.shareable_prefix_bytes(sliding, 10) == 2 * 10 * 2  # full layers only


# ---------------------------------------------------------------- bandwidth bounds


def test_decode_step_floor_and_ceilings():
    step_s = capacity.decode_step_floor_s(2 * GB, 1 * GB, 1e12)
    assert step_s == pytest.approx(0.003)
    assert capacity.tokens_per_s_ceiling_per_request(step_s) == pytest.approx(333.333, rel=1e-4)
    assert capacity.tokens_per_s_ceiling_aggregate(step_s, 8) == pytest.approx(2666.667, rel=1e-4)
    with pytest.raises(UserError):
        capacity.decode_step_floor_s(1, 1, 0)


def test_capacity_row_reads_active_weights():
    weights = capacity.weight_bytes(LLAMA_8B.weight_params)
    rows = [capacity.capacity_row(LLAMA_8B, t, 80 * GB, weights) for t in (500, 2_000, 8_000)]
    assert [r["max_concurrent_requests"] for r in rows] == [853, 213, 53]
    assert "decode_step_floor_s" not in rows[0]
    timed = capacity.capacity_row(LLAMA_8B, 8_000, 80 * GB, weights, bandwidth_bytes_per_s=3.35e12)
    assert timed["decode_step_floor_s"] == pytest.approx(17_109_098_496 / 3.35e12)
    moe = capacity.capacity_row(LLAMA_8B, 8_000, 80 * GB, weights, bandwidth_bytes_per_s=3.35e12,
                                read_weight_bytes=10**9)  # only 1 GB of active weights read
    assert moe["decode_step_floor_s"] == pytest.approx((10**9 + 1_048_576_000) / 3.35e12)


# ---------------------------------------------------------------- catalogs


def test_catalog_has_the_2026_models():
    names = {e["name"] for e in capacity.load_catalog()}
    assert {"DeepSeek-V3", "Kimi-K2", "Qwen3-30B-A3B", "Qwen3-Next-80B-A3B", "Llama-4-Scout",
            "Llama-3.3-70B", "Gemma-3-1B"} <= names


def test_gpu_presets():
    expected = {"H200": (141, 4_800), "H100 SXM": (80, 3_350), "A100 80GB": (80, 2_039),
                "L4": (24, 300), "T4": (16, 320)}
    for name, (gb, gb_per_s) in expected.items():
        gpu = capacity.find_gpu(name)
        assert gpu["memory_bytes"] == gb * GB and gpu["bandwidth_bytes_per_s"] == gb_per_s * GB
    assert capacity.find_gpu("h100")["name"] == "H100 SXM"
    assert capacity.find_gpu("B200") and capacity.find_gpu("MI300X")
    assert capacity.find_gpu("nope") is None


def test_model_needs_layers_and_heads():
    with pytest.raises(UserError):
        capacity.ModelKV(name="x", specs=(), num_attention_heads=1)
    with pytest.raises(UserError, match="num_kv_heads"):
        capacity.uniform_model(2, 0, 4, 2)


def test_assets_are_valid_json():
    for name in ("models.json", "gpus.json"):
        json.loads((assets.FOLDER / name).read_text(encoding="utf-8"))


def test_gpu_presets_plan_at_the_bytes_the_device_reports():
    """Each preset carries the bytes its device reports (torch's total_memory, what vLLM budgets
    from) with where that figure comes from; a published figure sits within a few per cent of
    the marketed GB, and a preset without one says so and falls back to the marketed bytes."""
    from kvviz.core import catalog

    for gpu in capacity.load_gpus():
        assert gpu["device_figure"] in {"published", "measured", "marketed"}, gpu["name"]
        assert gpu["device_source"].strip(), gpu["name"]
        if gpu["device_figure"] == "marketed":
            assert catalog.device_bytes(gpu) == gpu["memory_bytes"], gpu["name"]
        else:
            assert 0.95 < catalog.device_bytes(gpu) / gpu["memory_bytes"] < 1.1, gpu["name"]
    h100 = capacity.find_gpu("H100")
    assert catalog.device_bytes(h100) == 81_090 * 2**20 and "81090MB" in h100["device_source"]
    assert catalog.device_bytes({"name": "custom", "memory_bytes": 24 * 10**9}) == 24 * 10**9
