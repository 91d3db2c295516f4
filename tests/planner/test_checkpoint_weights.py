"""Weights as checkpoints store them (kvviz.planner.checkpoint_weights), and the plans that follow.

Published checkpoint sizes (sources in assets/models.json):
* gpt-oss-120b 60.8 GiB, gpt-oss-20b 12.8 GiB (OpenAI gpt-oss model card, checkpoint size);
* DeepSeek-V3 688,586,727,753 bytes of safetensors (deepseek-ai/DeepSeek-V3 @afb92e1f), which
  include the 14B multi-token-prediction layer vLLM does not load without speculative decoding:
  kvviz counts the 61 served layers, so its total is allowed 3 % below;
* Kimi-K2-Instruct 958.51 GiB in 61 safetensors files (a public model report listing every
  tensor's dtype);
* TheBloke/Mistral-7B-v0.1-AWQ 4.15 GB (the model card's "Provided files" table: AutoAWQ int4,
  group size 128, zero points; GB read as 10^9 B, as Hugging Face lists file sizes). The card
  rounds to 0.01 GB, so kvviz's count is allowed 0.5 % either way; read as GiB it would be
  7 % above kvviz's count and fail.
"""
from __future__ import annotations

import pytest

from kvviz.planner import checkpoint_weights as cw
from kvviz.planner import deployment, parallel
from kvviz.planner import cli as plan_cli
from kvviz.planner import configs as plan_models
from kvviz.planner.params import Tensor

GIB = 2**30


@pytest.mark.parametrize("name, published_bytes, rel_below, rel_above", [
    ("gpt-oss-120b", 60.8 * GIB, 0.01, 0.01),
    ("gpt-oss-20b", 12.8 * GIB, 0.01, 0.01),
    ("Kimi-K2", 958.51 * GIB, 0.01, 0.01),
    ("DeepSeek-V3", 688_586_727_753, 0.03, 0.0),  # the checkpoint also holds the MTP layer
    ("Mistral-7B-v0.1-AWQ", 4.15e9, 0.005, 0.005),
])
def test_checkpoint_bytes_match_published_sizes(name, published_bytes, rel_below, rel_above):
    model = plan_models.catalog_model(name)
    assert published_bytes * (1 - rel_below) <= model.checkpoint_bytes <= published_bytes * (1 + rel_above)
    # bf16 for every parameter would be far off: the format is what makes the difference
    assert model.params_total * 2 > 1.5 * model.checkpoint_bytes


def test_formats_are_named():
    assert plan_models.catalog_model("gpt-oss-20b").weight_format == "mxfp4 experts + bf16"
    assert plan_models.catalog_model("DeepSeek-V3").weight_format.startswith("fp8 (128×128")
    assert plan_models.catalog_model("Llama-3.1-8B").weight_format == "bf16"
    assert plan_models.catalog_model("Mistral-7B-v0.1-AWQ").weight_format == "awq int4 g128 + bf16"


def test_awq_checkpoint_counts_int4_payload_fp16_scales_and_packed_zeros():
    """Mistral-7B-v0.1-AWQ by hand: every linear weight of the 32 layers is int4 with one fp16
    scale and one 4-bit zero per 128 inputs per output row; embeddings, lm_head and norms stay
    16-bit. The total is the published 4.15 GB to within the card's rounding."""
    h, kv, inter, layers, vocab = 4096, 1024, 14336, 32, 32000
    linear = layers * (2 * h * h + 2 * h * kv + 3 * h * inter)
    groups = linear // 128
    other = 2 * vocab * h + layers * 2 * h + h  # embed, lm_head, two norms per layer, final norm
    by_hand = linear // 2 + 2 * groups + groups // 2 + 2 * other
    model = plan_models.catalog_model("Mistral-7B-v0.1-AWQ")
    assert model.checkpoint_bytes == by_hand
    assert abs(by_hand - 4.15e9) < 0.005e9


def test_unquantized_checkpoint_is_params_times_dtype():
    model = plan_models.catalog_model("Llama-3.1-8B")
    assert model.checkpoint_bytes == 2 * model.params_total


# ------------------------------------------------------------------ per-tensor rules, by hand


def test_awq_int4_tensor_bytes_by_hand():
    t = Tensor("model.layers.0.mlp.down_proj.weight", (4096, 14336), False)
    q = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
    groups = 4096 * 14336 // 128
    assert cw._awq_gptq_bytes(t, q) == 4096 * 14336 // 2 + 2 * groups + groups // 2


def test_gptq_adds_g_idx():
    t = Tensor("model.layers.0.self_attn.q_proj.weight", (256, 512), False)
    awq = cw._awq_gptq_bytes(t, {"quant_method": "awq", "bits": 4, "group_size": 128})
    gptq = cw._awq_gptq_bytes(t, {"quant_method": "gptq", "bits": 4, "group_size": 128})
    assert gptq - awq == 4 * 512


def test_fp8_block_scales_by_hand():
    t = Tensor("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", (576, 7168), False)
    # Kimi K2's report: weight_scale_inv [5, 56] float32 beside the fp8 weight
    assert cw._fp8_bytes(t, {"weight_block_size": [128, 128]}) == 576 * 7168 + 4 * 5 * 56


def test_mxfp4_is_4_25_bits():
    t = Tensor("model.layers.0.mlp.experts.down_proj", (32, 2880, 2880), True)
    assert cw._mxfp4_bytes(t, {}) * 8 == pytest.approx(t.numel * 4.25)


def test_bitsandbytes_4bit_and_8bit():
    t = Tensor("model.layers.0.mlp.up_proj.weight", (128, 256), False)
    assert cw._bnb_bytes(t, {"load_in_4bit": True}) == 128 * 256 // 2 + 4 * 128 * 256 // 64
    assert cw._bnb_bytes(t, {"load_in_8bit": True}) == 128 * 256 + 4 * 128


def test_compressed_tensors_channel_int8():
    t = Tensor("model.layers.0.mlp.up_proj.weight", (128, 256), False)
    q = {"config_groups": {"group_0": {"targets": ["Linear"], "weights": {
        "num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}}}}
    assert cw._compressed_bytes(t, q) == 128 * 256 + 2 * 128


@pytest.mark.parametrize("module, pattern, skipped", [
    ("model.layers.3.self_attn.q_proj", "model.layers.*.self_attn", True),
    ("model.layers.3.mlp.experts", "model.layers.*.self_attn", False),
    ("lm_head", "lm_head", True),
    ("model.layers.0.mlp.gate", "re:.*gate$", True),
    ("model.layers.0.mlp.gate_proj", "re:.*gate$", False),
])
def test_skip_patterns(module, pattern, skipped):
    assert cw._matches(module, pattern) is skipped


def test_modules_to_not_convert_stay_in_model_dtype():
    cfg = dict(plan_models.capacity.catalog_config(
        plan_models.capacity.find_catalog_entry("Llama-3.2-1B")))
    awq = {**cfg, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}
    skip_mlp = {**cfg, "quantization_config": {**awq["quantization_config"],
                                               "modules_to_not_convert": ["mlp"]}}
    bf16 = cw.checkpoint_weights(cfg).total_bytes
    all_int4 = cw.checkpoint_weights(awq).total_bytes
    attention_only = cw.checkpoint_weights(skip_mlp).total_bytes
    assert all_int4 < attention_only < bf16


# ------------------------------------------------------------------ plans as served


def _plan(name, gpu, tp=1, **kw):
    g = plan_models.capacity.find_gpu(gpu)
    s = deployment.Setup(gpu_name=g["name"],
                         gpu_bytes=g["memory_bytes"],
                         bandwidth_bytes_per_s=g["bandwidth_bytes_per_s"],
                         par=parallel.Parallel(tp, 1, 1),
                         **kw)
    model = plan_models.catalog_model(name)
    return model, s, deployment.plan_setup(model, s)


def test_gpt_oss_120b_on_one_h100():
    """Hopper holds the MXFP4 experts padded (Triton from 0.14: 64.4 GiB loaded in vllm#33155), so
    at 0.9 a request of the full 131,072 tokens does not fit: vLLM refused it (vllm#23278, #27508)."""
    _, _, plan = _plan("gpt-oss-120b", "H100")
    assert 64 * 2**30 < plan.per_gpu.weight_bytes < 66 * 2**30
    assert not plan.vllm.starts and plan.start.failures[0].kind == "kv_too_small"
    assert 0 < plan.vllm.longest_max_model_len < 131_072 and plan.plain.requests_per_replica > 0


def test_deepseek_v3_on_8_h200_tp8():
    _, _, plan = _plan("DeepSeek-V3", "H200", tp=8)
    assert 80e9 < plan.per_gpu.weight_bytes < 90e9  # 673 GB / 8
    assert plan.vllm.starts and plan.plain.requests_per_replica > 0


def test_override_weight_dtype_reads_bf16_as_before():
    _, _, plan = _plan("gpt-oss-120b", "H100", weight_dtype="bf16")
    assert plan.weights.bytes_total == 2 * plan.weights.params_total
    assert plan.vllm.starts is False


# ------------------------------------------------------------------ CLI


def _run(capsys, *argv):
    import argparse

    parser = argparse.ArgumentParser()
    plan_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["plan", *argv])
    rc = args.func(args)
    return rc, capsys.readouterr()


def test_cli_params_zero_is_refused(capsys):
    rc, out = _run(capsys, "GPT-2", "--params", "0")
    assert rc == 2 and "--params must be a positive parameter count" in out.err


def test_cli_default_is_the_checkpoint_format(capsys):
    rc, out = _run(capsys, "gpt-oss-20b", "--gpu", "H100")
    assert rc == 0 and "stored as mxfp4 experts + bf16 = 13.76 GB" in out.out


def test_cli_says_what_would_fit(capsys):
    rc, out = _run(capsys, "gpt-oss-120b", "--gpu", "H100", "--weight-dtype", "bf16")
    assert rc == 0 and "TP 4 (4 GPUs) is the smallest that starts it" in out.out


