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
from kvviz.planner import configs, deployment, vllm_memory, words

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
    plan = run_json(capsys, "Llama-3.1-8B", "--gpu", "H100", "--gpu-memory-utilization", "0.9",
                    "--context", "2000")
    b = plan["deployment"]["vllm_budget"]
    assert b["requested_bytes"] == 76_526_125_056  # ceil(85,029,027,840 × 0.9), vLLM's request_memory
    assert b["activation_peak_bytes"] == 8_192 * (2 * 4_096 + 3 * 14_336) * 2  # 838,860,800
    assert b["max_num_seqs"] == 1_024  # vLLM 0.32's default on a ≥ 70 GiB GPU that is not an A100
    assert b["sampler_bytes"] == 1_024 * 128_256 * 16  # 2,101,346,304
    kv = 76_526_125_056 - LLAMA_8B_WEIGHTS - 838_860_800 - 2_101_346_304
    assert b["kv_bytes"] == plan["kv_budget_bytes"] == kv == 57_525_395_456
    assert plan["deployment"]["vllm"]["gpu_memory_utilization"] == 0.9
    assert plan["deployment"]["vllm"]["num_blocks"] == kv // (131_072 * 16)
    assert plan["rows"][0]["max_concurrent_requests"] == kv // (131_072 * 2_000)


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


def test_max_num_seqs_sizes_the_sampler_and_the_defaults_follow_vllm(capsys):
    plan = run_json(capsys, "Llama-3.1-8B", "--gpu", "H100", "--gpu-memory-utilization", "0.9",
                    "--max-num-seqs", "256", "--context", "2000")
    assert plan["deployment"]["vllm_budget"]["sampler_bytes"] == 256 * 128_256 * 16
    a100 = run_json(capsys, "Llama-3.1-8B", "--gpu", "A100 80GB", "--gpu-memory-utilization", "0.9",
                    "--context", "2000")
    assert a100["deployment"]["vllm_budget"]["max_num_seqs"] == 256  # vLLM keeps A100 at 256
    assert vllm_memory.default_max_num_seqs(H100_BYTES, "H100 SXM", "cpu") == 128
    assert vllm_memory.default_max_num_seqs(24 * 10**9, "L4", "cuda") == 256


def test_vllm_flags_refused_in_one_line(capsys):
    assert "give one or the other" in run_error(capsys, "Llama-3.1-8B", "--overhead", "0.2",
                                                "--gpu-memory-utilization", "0.9")
    assert "--gpu-memory-utilization is a fraction" in run_error(
        capsys, "Llama-3.1-8B", "--gpu-memory-utilization", "1.5")
    assert "--max-num-seqs must be at least 1" in run_error(
        capsys, "Llama-3.1-8B", "--gpu-memory-utilization", "0.9", "--max-num-seqs", "0")


def test_the_budget_sentence_names_modelled_and_unknown_terms():
    model = configs.catalog_model("Llama-3.1-8B")
    plan = deployment.plan_setup(model, deployment.Setup(gpu_bytes=H100_BYTES, gpu_memory_utilization=0.9))
    sentence = words.budget_sentence(plan)
    assert "activation peak 838.86 MB (modelled" in sentence and "sampler 2.10 GB (modelled" in sentence
    assert "non-torch memory" in sentence and "CUDA graph memory" in sentence and "Not known to kvviz" in sentence
    assert f"{57_525_395_456 / 2**30:,.2f} GiB" in sentence  # 53.57 GiB, as vLLM's log prints it


def test_a_config_without_widths_models_no_activation_peak():
    shape = vllm_memory.ModelShape()
    assert vllm_memory.activation_peak_bytes(shape, 8_192, 1) == 0
    assert vllm_memory.sampler_bytes(shape, 1_024) == 0


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
