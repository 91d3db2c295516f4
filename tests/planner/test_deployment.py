"""kvviz.planner.deployment: a setup's plan (weights, budgets, vLLM blocks, what-ifs) over TP / PP /
DP, by hand, and what would make a refused setup start.

Llama-3.1-70B on 8 × H100 SXM, TP 8 (GB = 1e9 B): weights 70,553,706,496 params × 2 B =
141,107,412,992 B → 17,638,426,624 B per GPU; budget 80e9 − 8e9 − that = 54,361,573,376 B.
Per GPU per token: 80 layers × 2 × (8 KV heads / 8) × 128 × 2 B = 40,960 B.
"""
from __future__ import annotations

import pytest

from kvviz.core.errors import UserError
from kvviz.planner import capacity, deployment, parallel, words
from kvviz.planner import configs as plan_models
from kvviz.planner.parallel import Parallel
from kvviz.planner.results import FitChange
from tests.planner.test_checkpoint_weights import _plan


H100 = capacity.find_gpu("H100 SXM")


def setup(**kw) -> deployment.Setup:
    base = dict(gpu_name=H100["name"], gpu_bytes=H100["memory_bytes"],
                bandwidth_bytes_per_s=H100["bandwidth_bytes_per_s"], context_tokens=8000)
    return deployment.Setup(**{**base, **kw})


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


def test_when_nothing_fits_say_what_would():
    model, s, plan = _plan("gpt-oss-120b", "H100", weight_dtype="bf16")
    change = deployment.what_would_fit(model, s)
    assert change == FitChange(tp=4, gpus=4)  # 234 GB of bf16 weights: TP 2 leaves too little
    assert deployment._starts(model, deployment.replace(s, par=parallel.Parallel(4)))
    assert not deployment._starts(model, deployment.replace(s, par=parallel.Parallel(2)))
    text = words.refusal_sentence(plan.vllm, deployment.fit_advice(model, s))
    assert "TP 4 (4 GPUs) is the smallest" in text and "set max_model_len" not in text


def test_fit_advice_empty_when_it_starts():
    model, s, _ = _plan("gpt-oss-120b", "H100", max_model_len=32_768)
    assert deployment.fit_advice(model, s) == ""
