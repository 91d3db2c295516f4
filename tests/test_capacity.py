"""kvviz.capacity against worked examples computed by hand (the arithmetic is in the comments)."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from kvviz import capacity
from kvviz.capacity import KVShape

GB = 10**9

SMOLLM2_CONFIG = {  # HuggingFaceTB/SmolLM2-135M-Instruct config.json (abridged)
    "model_type": "llama", "num_hidden_layers": 30, "num_attention_heads": 9,
    "num_key_value_heads": 3, "head_dim": 64, "hidden_size": 576, "max_position_embeddings": 8192,
}
LLAMA_8B = KVShape(num_layers=32, num_kv_heads=8, head_dim=128, num_attention_heads=32,
                   weight_params=8_030_261_248, name="Llama-3.1-8B")


def smollm2() -> KVShape:
    return capacity.kv_shape_from_config(SMOLLM2_CONFIG, name="SmolLM2-135M")


# ---------------------------------------------------------------- bytes per token


def test_smollm2_bytes_per_token():
    # 2 × 30 layers × 3 kv heads × 64 head_dim × 2 B (bf16) = 23,040 B; × 4 B (fp32) = 46,080 B
    assert capacity.kv_bytes_per_token(smollm2(), "bf16") == 23_040
    assert capacity.kv_bytes_per_token(smollm2(), "fp32") == 46_080
    assert capacity.kv_bytes_per_token(smollm2(), "fp8") == 11_520  # 11,520 values × 1 B


def test_llama_8b_bytes_per_token_and_context():
    # 2 × 32 × 8 × 128 × 2 B = 131,072 B per token; × 8,000 tokens = 1,048,576,000 B
    assert capacity.kv_bytes_per_token(LLAMA_8B) == 131_072
    assert capacity.kv_bytes_for_context(LLAMA_8B, 8_000) == 1_048_576_000
    # batch 4: 4 × 1,048,576,000 = 4,194,304,000
    assert capacity.kv_bytes_for_context(LLAMA_8B, 8_000, batch=4) == 4_194_304_000


def test_mqa_config_and_what_if_variants():
    # Falcon-like MQA: 24 layers, 16 heads, 1 kv head, head_dim 2048 / 16 = 128
    # 2 × 24 × 1 × 128 × 2 B = 12,288 B per token
    mqa = capacity.kv_shape_from_config(
        {"num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 1, "hidden_size": 2048})
    assert (mqa.num_kv_heads, mqa.head_dim, mqa.attention_kind) == (1, 128, "MQA")
    assert capacity.kv_bytes_per_token(mqa) == 12_288
    # Llama-3.1-8B as MHA: 2 × 32 × 32 × 128 × 2 = 524,288; as MQA: 2 × 32 × 1 × 128 × 2 = 16,384
    assert capacity.kv_bytes_per_token(capacity.what_if_attention(LLAMA_8B, "mha")) == 524_288
    assert capacity.kv_bytes_per_token(capacity.what_if_attention(LLAMA_8B, "MQA")) == 16_384
    assert capacity.what_if_attention(LLAMA_8B, "gqa") == LLAMA_8B
    with pytest.raises(ValueError, match="variant"):
        capacity.what_if_attention(LLAMA_8B, "mla")


def test_sliding_window_caps_tokens_beyond_the_window():
    mistral = capacity.kv_shape_from_config({"num_hidden_layers": 32, "num_attention_heads": 32,
                                             "num_key_value_heads": 8, "hidden_size": 4096,
                                             "sliding_window": 4096, "model_type": "mistral"})
    assert (mistral.sliding_window, mistral.num_sliding_layers) == (4096, 32)
    # below the window every token counts: 131,072 B × 3,000 = 393,216,000
    assert capacity.kv_bytes_for_context(mistral, 3_000) == 393_216_000
    # 8,000 > 4,096: each layer holds min(8000, 4096) = 4,096 tokens → 131,072 × 4,096 = 536,870,912
    assert capacity.kv_bytes_for_context(mistral, 8_000) == 536_870_912
    # per-token figure ignores the window
    assert capacity.kv_bytes_per_token(mistral) == 131_072


def test_gemma2_half_sliding_layers():
    gemma = capacity.catalog_shape("Gemma-2-9B")  # 42 layers, 8 kv heads, head_dim 256, window 4096
    assert (gemma.num_sliding_layers, gemma.num_full_layers) == (21, 21)
    # per layer-token: 2 × 8 × 256 × 2 B = 8,192 B
    # at 8,000 tokens: 21 full layers × 8,000 + 21 sliding × 4,096 = 168,000 + 86,016 = 254,016
    # 254,016 × 8,192 = 2,080,899,072 B
    assert capacity.kv_bytes_for_context(gemma, 8_000) == 2_080_899_072
    # at 1,000 tokens (< window) all 42 layers hold 1,000: 42,000 × 8,192 = 344,064,000
    assert capacity.kv_bytes_for_context(gemma, 1_000) == 344_064_000


def test_what_if_window():
    windowed = capacity.what_if_window(LLAMA_8B, 1024)
    assert windowed.num_sliding_layers == 32
    assert capacity.kv_bytes_for_context(windowed, 8_000) == 131_072 * 1_024  # 134,217,728
    unwindowed = capacity.what_if_window(capacity.catalog_shape("Mistral-7B-v0.1"), None)
    assert capacity.kv_bytes_for_context(unwindowed, 8_000) == 1_048_576_000


# ---------------------------------------------------------------- KV dtypes


def test_bytes_per_element_including_scale_overhead():
    # per group of 64 values: one fp16 scale + one fp16 zero point = 4 B → 4 / 64 = 0.0625 B/value
    assert capacity.kv_bytes_per_element("fp32") == 4
    assert capacity.kv_bytes_per_element("bfloat16") == 2
    assert capacity.kv_bytes_per_element("torch.float16") == 2
    assert capacity.kv_bytes_per_element("fp8") == 1
    assert capacity.kv_bytes_per_element("int8") == 1.0625
    assert capacity.kv_bytes_per_element("int4") == 0.5625
    with pytest.raises(ValueError, match="int3"):
        capacity.kv_bytes_per_element("int3")


def test_int4_and_int8_smollm2():
    # 11,520 values per token (2 × 30 × 3 × 64)
    # int4: 11,520 × 0.5 = 5,760 payload + 11,520 / 64 groups × 4 B = 720 overhead → 6,480 B
    assert capacity.kv_bytes_per_token(smollm2(), "int4") == 6_480
    # int8: 11,520 + 720 = 12,240 B
    assert capacity.kv_bytes_per_token(smollm2(), "int8") == 12_240
    # 2,000 tokens in int4: 6,480 × 2,000 = 12,960,000 B
    assert capacity.kv_bytes_for_context(smollm2(), 2_000, "int4") == 12_960_000


def test_weight_bytes():
    assert capacity.weight_bytes(8_030_261_248, "bf16") == 16_060_522_496  # × 2 B
    assert capacity.weight_bytes(10**9, "int4") == 562_500_000  # × 0.5625 B
    assert capacity.weight_bytes(0) == 0


# ---------------------------------------------------------------- concurrency


def test_llama_8b_concurrency_in_80_gb():
    # weights 16,060,522,496 B; overhead 10 % of 80e9 = 8e9
    # budget = 80e9 − 8e9 − 16,060,522,496 = 55,939,477,504 B
    weights = capacity.weight_bytes(LLAMA_8B.weight_params)
    assert capacity.kv_budget_bytes(80 * GB, weights) == 55_939_477_504
    # 8,000 tokens: 55,939,477,504 / 1,048,576,000 = 53.35 → 53
    # 2,000 tokens: / 262,144,000 = 213.39 → 213;  500 tokens: / 65,536,000 = 853.57 → 853
    fits = [capacity.max_concurrent_requests(LLAMA_8B, t, 80 * GB, weights) for t in (500, 2_000, 8_000)]
    assert fits == [853, 213, 53]


def test_concurrency_with_fixed_overhead_bytes():
    # 24e9 − 0 weights − 4e9 overhead = 20e9; SmolLM2 at 2,000 tokens: 23,040 × 2,000 = 46,080,000
    # 20e9 / 46,080,000 = 434.03 → 434
    assert capacity.max_concurrent_requests(smollm2(), 2_000, 24 * GB, 0, overhead_bytes=4 * GB) == 434


def test_no_request_fits_when_weights_do_not():
    weights_70b = capacity.weight_bytes(70_553_706_496)  # 141.1 GB > 80 GB
    shape = capacity.catalog_shape("Llama-3.1-70B")
    assert capacity.kv_budget_bytes(80 * GB, weights_70b) == 0
    assert capacity.max_concurrent_requests(shape, 500, 80 * GB, weights_70b) == 0
    with pytest.raises(ValueError):
        capacity.max_concurrent_requests(shape, 0, 80 * GB, 0)


# ---------------------------------------------------------------- bandwidth bounds


def test_decode_step_floor_and_ceilings():
    # (2e9 weights + 1e9 cache) / 1e12 B/s = 3 ms; 1 / 0.003 = 333.3 tok/s; batch 8 → 2,666.7 tok/s
    step_s = capacity.decode_step_floor_s(2 * GB, 1 * GB, 1e12)
    assert step_s == pytest.approx(0.003)
    assert capacity.tokens_per_s_ceiling_per_request(step_s) == pytest.approx(333.333, rel=1e-4)
    assert capacity.tokens_per_s_ceiling_aggregate(step_s, 8) == pytest.approx(2666.667, rel=1e-4)
    with pytest.raises(ValueError):
        capacity.decode_step_floor_s(1, 1, 0)


def test_capacity_table_rows():
    weights = capacity.weight_bytes(LLAMA_8B.weight_params)
    rows = capacity.capacity_table(LLAMA_8B, (500, 2_000, 8_000), 80 * GB, weights)
    assert [r["max_concurrent_requests"] for r in rows] == [853, 213, 53]
    assert rows[2]["kv_bytes_per_request"] == 1_048_576_000
    assert "decode_step_floor_s" not in rows[0]
    timed = capacity.capacity_table(LLAMA_8B, [8_000], 80 * GB, weights, bandwidth_bytes_per_s=3.35e12)
    # (16,060,522,496 + 1,048,576,000) / 3.35e12 = 5.107 ms
    assert timed[0]["decode_step_floor_s"] == pytest.approx(17_109_098_496 / 3.35e12)
    # all 53 requests: (16,060,522,496 + 53 × 1,048,576,000) / 3.35e12 = 21.38 ms → 53 / that
    at_max_s = (16_060_522_496 + 53 * 1_048_576_000) / 3.35e12
    assert timed[0]["tokens_per_s_aggregate_ceiling_at_max"] == pytest.approx(53 / at_max_s)


# ---------------------------------------------------------------- parsing configs


def test_gpt2_style_config():
    shape = capacity.kv_shape_from_config(
        {"model_type": "gpt2", "n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024})
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim, shape.max_position) == (12, 12, 64, 1024)
    assert shape.attention_kind == "MHA" and shape.sliding_window is None
    assert capacity.kv_bytes_per_token(shape) == 36_864  # 2 × 12 × 12 × 64 × 2


def test_llama_style_config_derives_head_dim():
    shape = capacity.kv_shape_from_config({"num_hidden_layers": 32, "num_attention_heads": 32,
                                           "num_key_value_heads": 8, "hidden_size": 4096})
    assert (shape.head_dim, shape.num_kv_heads, shape.attention_kind) == (128, 8, "GQA")
    no_kv = capacity.kv_shape_from_config(
        {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64})
    assert no_kv.num_kv_heads == 4  # default: as many as attention heads


def test_qwen2_window_only_when_enabled():
    base = {"model_type": "qwen2", "num_hidden_layers": 24, "num_attention_heads": 14,
            "num_key_value_heads": 2, "hidden_size": 896, "sliding_window": 32768,
            "max_window_layers": 20}
    off = capacity.kv_shape_from_config({**base, "use_sliding_window": False})
    assert (off.sliding_window, off.num_sliding_layers) == (None, 0)
    # enabled: layers i >= max_window_layers slide → 24 − 20 = 4 layers
    on = capacity.kv_shape_from_config({**base, "use_sliding_window": True})
    assert (on.sliding_window, on.num_sliding_layers) == (32768, 4)
    # default max_window_layers is 28 ≥ 24 layers → none slide
    default = {k: v for k, v in base.items() if k != "max_window_layers"}
    assert capacity.kv_shape_from_config({**default, "use_sliding_window": True}).num_sliding_layers == 0


def test_gemma2_configs_with_and_without_layer_types():
    base = {"model_type": "gemma2", "num_hidden_layers": 26, "num_attention_heads": 8,
            "num_key_value_heads": 4, "head_dim": 256, "hidden_size": 2304, "sliding_window": 4096}
    assert capacity.kv_shape_from_config(base).num_sliding_layers == 13  # even layers of 26
    layer_types = ["sliding_attention", "full_attention"] * 13
    assert capacity.kv_shape_from_config({**base, "layer_types": layer_types}).num_sliding_layers == 13
    # Gemma-3-style pattern 6: (i + 1) % 6 == 0 is global → 26 − 26 // 6 = 22 sliding
    gemma3 = {**base, "model_type": "gemma3_text", "sliding_window_pattern": 6}
    assert capacity.kv_shape_from_config(gemma3).num_sliding_layers == 22
    full_only = {**base, "layer_types": ["full_attention"] * 26}
    assert capacity.kv_shape_from_config(full_only).sliding_window is None


def test_nested_text_config():
    shape = capacity.kv_shape_from_config({"model_type": "llava", "text_config": SMOLLM2_CONFIG}, name="vlm")
    assert capacity.kv_bytes_per_token(shape) == 23_040 and shape.name == "vlm"


def test_sliding_counts_match_transformers():
    """Our rules reproduce the layer_types transformers itself builds (Qwen2, Gemma2, Mistral)."""
    tf = pytest.importorskip("transformers")
    small = dict(num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                 intermediate_size=128, vocab_size=100)
    configs = [tf.Qwen2Config(use_sliding_window=True, sliding_window=8, max_window_layers=4, **small),
               tf.Qwen2Config(use_sliding_window=False, **small),
               tf.Gemma2Config(sliding_window=8, head_dim=16, **small),
               tf.MistralConfig(sliding_window=8, **small)]
    for config in configs:
        full = config.to_dict()
        expected = sum(t == "sliding_attention" for t in (full.get("layer_types") or [])) \
            if full.get("layer_types") else (6 if full.get("sliding_window") else 0)
        stripped = {k: v for k, v in full.items() if k != "layer_types"}
        assert capacity.kv_shape_from_config(full).num_sliding_layers == expected
        assert capacity.kv_shape_from_config(stripped).num_sliding_layers == expected


@pytest.mark.parametrize("missing, named", [
    ("num_hidden_layers", "num_hidden_layers"),
    ("num_attention_heads", "num_attention_heads"),
])
def test_missing_field_is_named(missing, named):
    cfg = {k: v for k, v in SMOLLM2_CONFIG.items() if k != missing}
    with pytest.raises(ValueError, match=named):
        capacity.kv_shape_from_config(cfg)


def test_missing_head_dim_and_hidden_size_is_named():
    with pytest.raises(ValueError, match="head_dim.*hidden_size"):
        capacity.kv_shape_from_config({"num_hidden_layers": 2, "num_attention_heads": 4})


def test_wrong_type_is_named():
    with pytest.raises(ValueError, match="num_attention_heads must be a positive integer"):
        capacity.kv_shape_from_config({**SMOLLM2_CONFIG, "num_attention_heads": "9"})


def test_sliding_layers_without_window_is_named():
    with pytest.raises(ValueError, match="sliding_window"):
        capacity.kv_shape_from_config({**SMOLLM2_CONFIG, "layer_types": ["sliding_attention"] * 30})


def test_kvshape_rejects_nonsense():
    with pytest.raises(ValueError, match="num_kv_heads"):
        KVShape(num_layers=2, num_kv_heads=0, head_dim=4, num_attention_heads=2)
    with pytest.raises(ValueError, match="sliding_window"):
        KVShape(num_layers=2, num_kv_heads=1, head_dim=4, num_attention_heads=2, num_sliding_layers=1)


# ---------------------------------------------------------------- shipped catalogs


def test_every_catalog_model_parses_and_has_a_source():
    entries = capacity.load_catalog()
    assert len({e["name"] for e in entries}) == len(entries) >= 21
    for entry in entries:
        shape = capacity.kv_shape_from_config(entry, name=entry["name"])
        assert entry["source"] and shape.weight_params and shape.max_position
        assert shape.num_attention_heads % shape.num_kv_heads == 0


def test_catalog_facts():
    assert capacity.kv_bytes_per_token(capacity.catalog_shape("smollm2-135m")) == 23_040
    assert capacity.kv_bytes_per_token(capacity.catalog_shape("meta-llama/Llama-3.1-8B-Instruct")) == 131_072
    assert capacity.catalog_shape("gpt2").head_dim == 64
    phi3 = capacity.catalog_shape("Phi-3-mini-4k")  # 2 × 32 × 32 × 96 × 2 = 393,216 B per token
    assert capacity.kv_bytes_per_token(phi3) == 393_216 and phi3.sliding_window == 2047
    qwen = capacity.catalog_shape("Qwen2.5-7B")  # 2 × 28 × 4 × 128 × 2 = 57,344 B per token
    assert capacity.kv_bytes_per_token(qwen) == 57_344 and qwen.sliding_window is None
    with pytest.raises(ValueError, match="known"):
        capacity.catalog_shape("no-such-model")


def test_gpu_presets():
    expected = {"H200": (141, 4_800), "H100 SXM": (80, 3_350), "A100 80GB": (80, 2_039),
                "A100 40GB": (40, 1_555), "L4": (24, 300), "RTX 4090": (24, 1_008),
                "T4": (16, 320), "L40S": (48, 864)}
    for name, (gb, gb_per_s) in expected.items():
        gpu = capacity.find_gpu(name)
        assert gpu["memory_bytes"] == gb * GB and gpu["bandwidth_bytes_per_s"] == gb_per_s * GB
    assert capacity.find_gpu("h100")["name"] == "H100 SXM"
    assert capacity.find_gpu("nope") is None


def test_capacity_imports_only_the_standard_library():
    tree = ast.parse(Path(capacity.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "json", "math", "dataclasses", "pathlib"}


def test_assets_are_valid_json():
    for name in ("models.json", "gpus.json"):
        json.loads((capacity.ASSETS_DIR / name).read_text(encoding="utf-8"))
