"""kvviz.planner.parallel: TP / PP / DP splits of heads, latents, states and layers, by hand
(the plans over them: test_deployment.py)."""
from __future__ import annotations

import pytest

from kvviz.core.errors import UserError
from kvviz.planner import capacity, parallel
from kvviz.planner import configs as plan_models
from kvviz.planner.parallel import Parallel


def test_kv_heads_split_or_replicated():
    llama = plan_models.catalog_model("Llama-3.1-70B").specs[0]  # 8 KV heads × 128
    assert parallel.rank_spec(llama, 8).kv_heads == 1
    assert parallel.rank_spec(llama, 8).values_per_token == 2 * 128
    assert parallel.rank_spec(llama, 2).values_per_token == 2 * 4 * 128
    # 16 ranks, 8 KV heads: each head lives on two ranks, every rank caches one
    assert parallel.rank_spec(llama, 16).kv_heads == 1 == parallel.kv_heads_per_rank(8, 16)


def test_mla_latent_is_replicated_on_every_rank():
    latent = plan_models.catalog_model("DeepSeek-V3").specs[0]
    assert parallel.rank_spec(latent, 8) == latent  # 576 values per token on each of 8 GPUs


def test_states_split_by_tp():
    state = next(s for s in plan_models.catalog_model("Qwen3-Next-80B-A3B").specs if s.kind == "state")
    half = parallel.rank_spec(state, 2)
    assert half.state_values == state.state_values // 2
    assert half.state_float32_values == state.state_float32_values // 2


def test_pp_layer_counts_follow_vllm():
    assert parallel.pp_layer_counts(80, 3) == [27, 27, 26]  # the remainder before the last stage
    assert parallel.pp_layer_counts(61, 4) == [15, 15, 16, 15]
    assert parallel.pp_layer_counts(32, 1) == [32]


@pytest.mark.parametrize("par, heads, kv_heads, message", [
    (Parallel(3), 64, 8, "TP 3 does not divide the model's 64 attention heads"),
    (Parallel(4), 12, 6, "does not divide the model's 6 KV heads"),
    (Parallel(8), 24, 3, "not a multiple of the model's 3 KV heads"),
    (Parallel(1, 100), 64, 8, "more stages than"),
    (Parallel(0), 64, 8, "TP must be"),
])
def test_impossible_splits_are_named(par, heads, kv_heads, message):
    model = capacity.uniform_model(80, kv_heads, 128, heads)
    with pytest.raises(UserError, match=message):
        parallel.check_parallel(par, model.specs, model.num_attention_heads)


def test_label():
    assert Parallel(8).label("H100 SXM") == "8×H100 SXM, TP 8"
    assert Parallel(8, 2, 2).label("H200") == "32×H200, TP 8 · PP 2 · DP 2"
    assert Parallel().label("L4") == "1×L4"


