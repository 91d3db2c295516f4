"""kvviz.planner.parallel and kvviz.planner.deployment: TP / PP / DP splits, by hand.

Llama-3.1-70B on 8 × H100 SXM, TP 8 (GB = 1e9 B): weights 70,553,706,496 params × 2 B =
141,107,412,992 B → 17,638,426,624 B per GPU; budget 80e9 − 8e9 − that = 54,361,573,376 B.
Per GPU per token: 80 layers × 2 × (8 KV heads / 8) × 128 × 2 B = 40,960 B.
"""
from __future__ import annotations

import pytest

from kvviz.core.errors import UserError
from kvviz.planner import capacity, deployment, parallel
from kvviz.planner import configs as plan_models
from kvviz.planner.parallel import Parallel

H100 = capacity.find_gpu("H100 SXM")


def setup(**kw) -> deployment.Setup:
    base = dict(gpu_name=H100["name"], gpu_bytes=H100["memory_bytes"],
                bandwidth_bytes_per_s=H100["bandwidth_bytes_per_s"], context_tokens=8000)
    return deployment.Setup(**{**base, **kw})


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


def test_llama_70b_on_8_h100_tp8():
    plan = deployment.plan_setup(plan_models.catalog_model("Llama-3.1-70B"), setup(par=Parallel(8)))
    assert plan.label == "8×H100 SXM, TP 8" and plan.gpus == 8
    assert plan.weights.bytes_total == 141_107_412_992
    assert plan.per_gpu.weight_bytes == 17_638_426_624
    assert plan.per_gpu.kv_budget_bytes == 54_361_573_376
    assert plan.per_gpu.kv_bytes_per_token == 40_960
    assert plan.plain.kv_bytes_per_request_per_gpu == 327_680_000  # × 8,000
    assert plan.plain.requests_per_replica == 165  # 54,361,573,376 // 327,680,000
    # vLLM: page 16 × 256 × 2 = 8,192 B; 54,361,573,376 // 8,192 // 80 = 82,949 blocks
    assert plan.vllm.num_blocks == 82_949 and plan.vllm.num_tokens == 82_949 * 16
    assert plan.vllm.requests_at_context_per_replica == 82_949 // 500  # 8,000 / 16 blocks


def test_dp_multiplies_and_pp_splits_layers():
    model = plan_models.catalog_model("Llama-3.1-70B")
    two = deployment.plan_setup(model, setup(par=Parallel(8, 1, 2)))
    assert two.plain.requests_total == 2 * 165 and two.gpus == 16
    pp = deployment.plan_setup(model, setup(par=Parallel(4, 2)))
    assert pp.per_gpu.layers == 40
    # 2 KV heads per rank × 40 layers: 40 × 2 × 2 × 128 × 2 B = 40,960 B per token per GPU
    assert pp.per_gpu.kv_bytes_per_token == 40_960
    # each stage: 40 layers (1,710,399,488 parameters each ... ) and the embedding (first) or the
    # LM head (last), 128,256 × 8,192 each: the same bytes on both, split over 4 TP ranks
    layer = (model.params_total - 2 * 128_256 * 8_192 - 8_192) // 80  # the final norm aside
    assert pp.per_gpu.weight_bytes == -(-(40 * layer + 128_256 * 8_192 + 8_192) * 2 // 4)  # the last stage


def test_pipeline_stages_hold_the_embedding_first_and_the_head_last():
    """vLLM places the embedding on the first stage and the LM head on the last (get_pp_indices
    splits only the decoder layers): PP 4 of Llama-3.1-8B puts 8 layers and 1.05 GB of embedding on
    rank 0, 4.23 GiB where vLLM's log prints 4.26 (llm-d-planner v0.19.0 run, PP 4)."""
    model = plan_models.catalog_model("Llama-3.1-8B")
    stages = deployment.stage_weight_bytes(model, setup(par=Parallel(1, 4)), 0)
    assert stages[-1] - stages[0] == 4_096 * 2  # the final norm sits with the head
    assert stages[0] > stages[1] == stages[2]
    assert abs(stages[0] / 2**30 - 4.26) < 0.05


def test_deepseek_v3_does_not_fit_on_one_h100_any_more():
    model = plan_models.catalog_model("DeepSeek-V3")
    one = deployment.plan_setup(model, setup(context_tokens=2000))
    # the checkpoint's fp8 weights (673 GB) still fill one 80 GB GPU many times over
    assert one.per_gpu.weight_bytes > 6.5e11 and one.plain.requests_per_replica == 0
    # fp8 weights over 8 × H200: 671 GB / 8 ≈ 84 GB each, KV fits; the latent is on every rank
    h200 = capacity.find_gpu("H200")
    eight = deployment.plan_setup(model, setup(gpu_bytes=h200["memory_bytes"], weight_dtype="fp8",
                                               par=Parallel(8), context_tokens=2000))
    assert eight.per_gpu.kv_bytes_per_token == 61 * 576 * 2
    assert eight.plain.requests_per_replica > 100


def test_prefix_and_offload_what_ifs():
    model = plan_models.catalog_model("Llama-3.1-70B")
    plan = deployment.plan_setup(model, setup(par=Parallel(8), prefix_tokens=1000,
                                              offload_bytes=200 * 10**9))
    # 992 tokens (62 whole blocks) shared: (54,361,573,376 − 40,960 × 992) // (40,960 × 7,008)
    assert plan.prefix.shared_tokens == 992
    assert plan.prefix.requests_per_replica == (54_361_573_376 - 40_960 * 992) // (40_960 * 7008)
    # 200e9 / 8 GPUs = 25e9 more per GPU: (54,361,573,376 + 25e9) // 327,680,000 = 242
    assert plan.offload.requests_kept_per_replica == 242
    assert plan.offload.requests_decoding_per_replica == 165


def test_bad_setups_are_named():
    model = plan_models.catalog_model("SmolLM2-135M")
    with pytest.raises(UserError, match="shared prefix"):
        deployment.plan_setup(model, setup(prefix_tokens=8000))
    with pytest.raises(UserError, match="block size"):
        deployment.plan_setup(model, setup(block_size=0))
    assert deployment.plan_setup(model, setup(kv_dtype="int4")).vllm.error
