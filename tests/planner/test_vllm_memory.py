"""vLLM's own flags in `kvviz plan` and on the page: --gpu-memory-utilization (vLLM's budget with
its modelled deductions), --kv-cache-memory-bytes (overrides it, as in vLLM), --max-num-seqs."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.app.ui import inert
from kvviz.planner import cli as plan_cli
from kvviz.planner import configs, deployment, vllm_memory, vllm_versions, words

PAGE = str(Path(__file__).resolve().parents[2] / "app_pages" / "planner.py")
H100_BYTES = 81_090 * 2**20  # the preset's device bytes (torch's total_memory printout)
LLAMA_8B_WEIGHTS = 16_060_522_496  # 8,030,261,248 parameters × 2 B


def run_json(capsys, *argv: str) -> dict:
    parser = argparse.ArgumentParser(prog="kvviz")
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    assert plan_cli.run(parser.parse_args(["plan", *argv, "--json"])) == 0
    return json.loads(capsys.readouterr().out)


def run_error(capsys, *argv: str) -> str:
    parser = argparse.ArgumentParser(prog="kvviz")
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    assert plan_cli.run(parser.parse_args(["plan", *argv])) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_gpu_memory_utilization_gives_vllms_budget_term_by_term(capsys):
    """vLLM 0.32 on an H100 at 0.9: every term, as gpu_worker.determine_available_memory sums them."""
    plan = run_json(capsys, "Llama-3.1-8B", "--gpu", "H100", "--gpu-memory-utilization", "0.9",
                    "--context", "2000")
    b = plan["deployment"]["vllm_budget"]
    assert b["requested_bytes"] == 76_526_125_056  # ceil(85,029,027,840 × 0.9), vLLM's request_memory
    assert b["max_num_seqs"] == 1_024 and b["max_num_batched_tokens"] == 8_192  # 0.32's defaults on H100
    assert b["forward_bytes"] == 8_192 * (3 * 4_096 + 3 * 14_336) * 2  # 905,969,664
    assert b["sampler_bytes"] == 1_024 * 128_256 * 15  # the 0.17+ sampler pass: 15 B per logit
    assert b["activation_peak_bytes"] == max(b["forward_bytes"], b["sampler_bytes"])  # the larger, not both
    assert b["non_torch_bytes"] == round(0.25 * 2**30)  # TP 1, 0.18 on
    assert b["cuda_graph_deducted"] is True and b["cuda_graph_bytes"] == 51 * 12 * 2**20 + 2**30 // 4
    kv = (76_526_125_056 - LLAMA_8B_WEIGHTS - b["activation_peak_bytes"] - b["non_torch_bytes"]
          - b["cuda_graph_bytes"])
    assert b["kv_bytes"] == plan["kv_budget_bytes"] == kv
    assert plan["deployment"]["vllm"]["num_blocks"] == kv // (131_072 * 16)
    assert plan["rows"][0]["max_concurrent_requests"] == kv // (131_072 * 2_000)


def test_the_release_changes_the_terms(capsys):
    """Before 0.21 vLLM leaves CUDA graphs outside the budget; before 0.17 its sampler pass costs
    39 B per logit (llm-d-planner's Qwen3-14B table: 5.64 GiB at 0.16, 2.23 at 0.17)."""
    plans = {v: run_json(capsys, "Qwen3-14B", "--gpu", "H100", "--gpu-memory-utilization", "0.95",
                         "--max-model-len", "8192", "--vllm-version", v, "--context", "2000")
             for v in ("0.16", "0.17", "0.32")}
    sampler = {v: p["deployment"]["vllm_budget"]["sampler_bytes"] for v, p in plans.items()}
    assert sampler["0.16"] == 1_024 * 151_936 * 39 and sampler["0.17"] == 1_024 * 151_936 * 15
    assert abs(sampler["0.16"] / 2**30 - 5.64) < 0.05 and abs(sampler["0.17"] / 2**30 - 2.23) < 0.1
    assert not plans["0.17"]["deployment"]["vllm_budget"]["cuda_graph_deducted"]
    assert plans["0.32"]["deployment"]["vllm_budget"]["cuda_graph_deducted"]
    assert plans["0.16"]["vllm_release"] == "V1 0.8–0.16" and plans["0.32"]["vllm_version"] == "0.32"


def test_tp_adds_nccl_buffers_and_pp_splits_the_peak(capsys):
    """TP > 1 on linked GPUs: ~2.1 GiB of non-torch memory per GPU (v0.19 logs: 2.06-2.13); PP:
    the first stage runs no sampler, the last holds the LM head."""
    tp2 = run_json(capsys, "Llama-3.1-8B", "--gpu", "H100", "--tp", "2", "--gpu-memory-utilization", "0.95",
                   "--context", "2000")["deployment"]["vllm_budget"]
    assert tp2["non_torch_bytes"] == round(2.1 * 2**30)
    pcie = run_json(capsys, "Llama-3.1-8B", "--gpu", "4090", "--tp", "2", "--gpu-memory-utilization", "0.95",
                    "--context", "2000")["deployment"]["vllm_budget"]
    assert pcie["non_torch_bytes"] == round(0.25 * 2**30)  # no P2P between consumer cards
    pp = run_json(capsys, "Llama-3.1-8B", "--gpu", "H100", "--pp", "2", "--gpu-memory-utilization", "0.95",
                  "--context", "2000")["deployment"]["vllm_budget"]
    first, last = pp["stages"]
    assert first["sampler_bytes"] == 0 < last["sampler_bytes"] and first["non_torch_bytes"] == round(0.07 * 2**30)
    assert pp["kv_bytes"] == min(first["kv_bytes"], last["kv_bytes"]) == last["kv_bytes"]


def test_without_vllm_flags_the_json_keeps_its_shape(capsys):
    plan = run_json(capsys, "Llama-3.1-8B", "--gpu", "H100", "--context", "2000")
    assert "vllm_budget" not in plan["deployment"]


def test_kv_cache_memory_bytes_overrides_the_budget_and_ignores_utilization(capsys):
    given = 10 * 2**30
    low = run_json(capsys, "Llama-3.1-8B", "--gpu", "H100", "--kv-cache-memory-bytes", str(given),
                   "--gpu-memory-utilization", "0.5", "--context", "2000")
    high = run_json(capsys, "Llama-3.1-8B", "--gpu", "H100", "--kv-cache-memory-bytes", str(given),
                    "--gpu-memory-utilization", "0.95", "--context", "2000")
    assert low["kv_budget_bytes"] == high["kv_budget_bytes"] == given
    assert low["deployment"]["vllm"]["num_blocks"] == given // (131_072 * 16) == 5_120
    assert low["deployment"]["vllm_budget"]["given"] is True


def test_a_given_kv_cache_too_large_for_the_gpu_does_not_start(capsys):
    """200 GiB of KV cache on one H100: vLLM takes the figure unchecked and runs out of memory
    allocating it; kvviz says so, and --json never says it starts beside a failure."""
    plan = run_json(capsys, "Llama-3.1-8B", "--gpu", "H100", "--kv-cache-memory-bytes", str(200 * 2**30),
                    "--context", "131072")
    assert [r["kind"] for r in plan["refusals"]] == ["kv_given_too_large"]
    assert plan["start"] == "refused" and plan["deployment"]["vllm"]["starts"] is False
    assert plan["refusals"][0]["message"].startswith("CUDA out of memory allocating the KV cache")


def test_max_num_seqs_sizes_the_sampler_and_the_defaults_follow_vllm(capsys):
    plan = run_json(capsys, "Llama-3.1-8B", "--gpu", "H100", "--gpu-memory-utilization", "0.9",
                    "--max-num-seqs", "256", "--context", "2000")
    assert plan["deployment"]["vllm_budget"]["sampler_bytes"] == 256 * 128_256 * 15
    a100 = run_json(capsys, "Llama-3.1-8B", "--gpu", "A100 80GB", "--gpu-memory-utilization", "0.9",
                    "--context", "2000")
    assert a100["deployment"]["vllm_budget"]["max_num_seqs"] == 256  # vLLM keeps A100 at 256
    assert a100["deployment"]["vllm_budget"]["max_num_batched_tokens"] == 2_048
    assert vllm_versions.default_limits(vllm_versions.release_for(None), None, H100_BYTES, "H100 SXM", "cpu")[0] == 128
    assert vllm_versions.default_limits(vllm_versions.release_for("0.8.0"), "0.8.0", H100_BYTES, "H100 SXM", "cuda") == (256, 8192)
    assert vllm_versions.default_limits(vllm_versions.release_for("0.7"), "0.7", H100_BYTES, "H100 SXM", "cuda")[1] is None


def test_vllm_flags_refused_in_one_line(capsys):
    assert "give one or the other" in run_error(capsys, "Llama-3.1-8B", "--overhead", "0.2",
                                                "--gpu-memory-utilization", "0.9")
    assert "--gpu-memory-utilization is a fraction" in run_error(
        capsys, "Llama-3.1-8B", "--gpu-memory-utilization", "1.5")
    assert "--max-num-seqs must be at least 1" in run_error(
        capsys, "Llama-3.1-8B", "--gpu-memory-utilization", "0.9", "--max-num-seqs", "0")
    assert "--vllm-version: unknown vLLM version 'latest'" in run_error(
        capsys, "Llama-3.1-8B", "--vllm-version", "latest")
    assert "older" in run_error(capsys, "Llama-3.1-8B", "--vllm-version", "0.5.4")


def test_the_budget_sentence_names_every_term():
    model = configs.catalog_model("Llama-3.1-8B")
    plan = deployment.plan_setup(model, deployment.Setup(gpu_bytes=H100_BYTES, gpu_memory_utilization=0.9))
    sentence = words.budget_sentence(plan)
    for term in ("activation peak", "non-torch memory", "CUDA graphs", "modelled", "vLLM 0.32 (V1 0.21 on rules)"):
        assert term in sentence
    assert f"{plan.vllm_budget.kv_bytes / 2**30:,.2f} GiB" in sentence  # as vLLM's log prints it
    old = deployment.plan_setup(model, deployment.Setup(gpu_bytes=H100_BYTES, gpu_memory_utilization=0.9,
                                                        vllm_version="0.19"))
    assert "captured outside the budget" in words.budget_sentence(old)


def test_a_config_without_widths_models_no_activation_peak():
    shape = vllm_memory.ModelShape()
    assert vllm_memory.forward_bytes_per_token(shape, 1) == 0
    assert vllm_memory.sampler_bytes(shape, 1_024, vllm_versions.release_for(None)) == 0


def test_a_moe_forward_pass_uses_the_fused_moe_caches():
    """gpt-oss-20b: 4 experts of 2,880 per token; vLLM's fused-MoE caches hold top-k × (max(2I, H) + I)."""
    shape = configs.catalog_model("gpt-oss-20b").shape
    assert (shape.expert_intermediate_size, shape.experts_per_token, shape.intermediate_size) == (2_880, 4, None)
    assert vllm_memory.forward_bytes_per_token(shape, 1) == (3 * 2_880 + 4 * (5_760 + 2_880)) * 2
    scout = configs.catalog_model("Llama-4-Scout").shape
    assert scout.shared_intermediate_size == 8_192 and scout.experts_per_token == 1


@pytest.mark.slow
def test_page_budget_as_vllm_equals_the_cli(capsys):
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.query_params.update(plan_vllm_budget="true", plan_gpu_memory_utilization="0.9", plan_context="2000")
    at.run()
    assert not at.exception and not at.error
    cli = run_json(capsys, "Llama-3.1-8B", "--gpu", "H100", "--gpu-memory-utilization", "0.9",
                   "--context", "2000")
    model = configs.catalog_model("Llama-3.1-8B")
    plan = deployment.plan_setup(model, deployment.Setup(gpu_bytes=H100_BYTES, gpu_memory_utilization=0.9))
    captions = [c.value for c in at.caption]
    assert inert(words.budget_sentence(plan)) in captions  # Markdown-escaped, the CLI's words
    fits = {m.label: m.value for m in at.metric}["Requests that fit at 2,000 tokens"]
    assert fits == f"{cli['rows'][0]['max_concurrent_requests']:,}"
