"""Will it start? kvviz's foreseen start-up refusals in vLLM 0.32's own words, checked against
vLLM's own functions (one subprocess of .venv-vllm per session, bounded), and the command line."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.planner import cli as plan_cli
from kvviz.planner import configs, deployment, will_start
from kvviz.planner import serving_plan as sp

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
PAGE = str(ROOT / "app_pages" / "planner.py")
TIMEOUT_S = 240
BLOCKS = (16, 32, 48, 64, 128)
MEMORY_CASE = (3 * 2**30, 2**30, 131_072, 43_690)  # needed, available, max_model_len, estimate
VLLM_SIDE = f"""
import json
from vllm.v1.worker.utils import select_common_block_size
from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
from vllm.v1.core.kv_cache_utils import _check_enough_kv_cache_memory
out = {{}}
for bs in {BLOCKS!r}:
    try:
        out[str(bs)] = select_common_block_size(bs, [CPUAttentionBackend])
    except ValueError as err:
        out[str(bs)] = str(err)
needed, available, length, estimate = {MEMORY_CASE!r}
try:
    _check_enough_kv_cache_memory(available, lambda: needed, length, lambda m: estimate)
except ValueError as err:
    out["memory"] = str(err)
import sys, torch
from vllm.engine.arg_utils import EngineArgs
for amx in (False, True):  # vLLM's CPU platform asks torch whether the CPU has AMX tiles
    torch.cpu._is_amx_tile_supported = lambda amx=amx: amx
    cfg = EngineArgs(model=sys.argv[1], skip_tokenizer_init=True, max_model_len=2048, dtype="bfloat16",
                     enforce_eager=True, block_size=64).create_engine_config()
    out["mla_amx" if amx else "mla_no_amx"] = [cfg.cache_config.block_size, cfg.cache_config.enable_prefix_caching]
from vllm.model_executor.layers.attention.attention import _largest_kernel_block_within
out["sliding"] = {{str(bs): _largest_kernel_block_within(CPUAttentionBackend, 512, 512 * bs, bs)
                  for bs in {BLOCKS!r}}}  # a sliding layer's own block at --block-size bs
print("RESULT " + json.dumps(out))
"""
TINY_MLA = dict(vocab_size=1024, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
                num_experts_per_tok=2, n_shared_experts=1, kv_lora_rank=512, q_lora_rank=64,
                qk_rope_head_dim=64, qk_nope_head_dim=32, v_head_dim=32, first_k_dense_replace=1,
                max_position_embeddings=4096, topk_method="noaux_tc", n_group=1, topk_group=1)


def tiny_mla_dir(root: Path) -> Path:
    """A tiny DeepSeek-V3 (MLA: the 512 + 64 latent vLLM's CPU backends take) config folder."""
    from transformers import DeepseekV3Config

    config = DeepseekV3Config(**TINY_MLA)
    config.architectures = ["DeepseekV3ForCausalLM"]
    config.save_pretrained(root)
    return root


@pytest.fixture(scope="session")
def vllm_says(tmp_path_factory) -> dict:
    """vLLM's own answers, from its own functions in .venv-vllm (a missing vLLM fails, never skips)."""
    assert VLLM_PYTHON.exists(), f"{VLLM_PYTHON} is missing: make vllm-install"
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    model_dir = tiny_mla_dir(tmp_path_factory.mktemp("tiny-mla"))
    proc = subprocess.Popen([str(VLLM_PYTHON), "-c", VLLM_SIDE, str(model_dir)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
    assert line, err[-2000:]
    return json.loads(line.removeprefix("RESULT "))


def cpu_plan(block: int):
    model = configs.catalog_model("Llama-3.1-8B")
    setup = deployment.Setup(gpu_bytes=81_090 * 2**20, platform="cpu", block_size=block)
    return deployment.plan_setup(model, setup), setup


@pytest.mark.parametrize("block", BLOCKS)
def test_block_size_refusal_is_vllms(vllm_says, block):
    plan, setup = cpu_plan(block)
    refusal = will_start.block_size_refusal(plan.vllm, setup)
    if isinstance(vllm_says[str(block)], int):
        assert refusal is None and vllm_says[str(block)] == block
    else:
        assert refusal is not None and refusal.message == vllm_says[str(block)]
        assert refusal.fix.startswith(f"--block-size {32 * -(-block // 32)}")


@pytest.mark.parametrize("block", BLOCKS)
def test_a_sliding_layer_takes_the_block_vllms_cpu_kernel_gives_it(vllm_says, block):
    """vLLM picks a sliding-window layer's block itself (16 → 32, 48 → 32 on CPU); a Mistral-style
    model, every layer sliding, then starts where a full-attention one is refused."""
    assert sp.sliding_block(block, sp.CPU.kernel_block) == vllm_says["sliding"][str(block)]
    model = configs.model_from_config({"model_type": "mistral", "num_hidden_layers": 4, "hidden_size": 256,
                                       "num_attention_heads": 4, "num_key_value_heads": 2,
                                       "sliding_window": 256, "vocab_size": 1024}, given_params=10**6)
    setup = deployment.Setup(gpu_bytes=2**30, platform="cpu", block_size=block)
    plan = deployment.plan_setup(model, setup)
    assert plan.vllm.block_size == vllm_says["sliding"][str(block)]
    assert will_start.block_size_refusal(plan.vllm, setup) is None


@pytest.mark.parametrize("amx", [False, True])
def test_mla_on_cpu_follows_vllms_amx_rule(vllm_says, amx, monkeypatch):
    """Without AMX vLLM's CPU_MLA forces block 16 and turns prefix caching off; with AMX nothing."""
    monkeypatch.setattr(sp, "amx_tiles", lambda: amx)
    model = configs.model_from_config({**TINY_MLA, "model_type": "deepseek_v3"}, given_params=10**6)
    plan = deployment.plan_setup(model, deployment.Setup(platform="cpu", block_size=64, max_model_len=2048))
    expected = vllm_says["mla_amx" if amx else "mla_no_amx"]
    assert [plan.vllm.block_size, plan.vllm.prefix_caching] == expected == ([64, True] if amx else [16, False])
    assert will_start.refusals(plan, deployment.Setup(platform="cpu", block_size=64), mla=True) == []


def test_memory_refusal_is_vllms_sentence(vllm_says):
    ours = will_start.memory_message(*MEMORY_CASE)
    assert vllm_says["memory"].startswith(ours) and "43690" in ours


def test_cli_says_whether_it_starts_and_prints_the_command(capsys):
    parser = argparse.ArgumentParser(prog="kvviz")
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    assert plan_cli.run(parser.parse_args(["plan", "Llama-3.1-8B", "--platform", "cpu", "--json"])) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["message"] for r in out["refusals"]] == [
        "No common block size for 16 (CPU_ATTN: [MultipleOf(32)])."]
    assert plan_cli.run(parser.parse_args(["plan", "Llama-3.1-8B", "--platform", "cpu", "--block-size", "128",
                                           "--max-model-len", "8192", "--json"])) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["refusals"] == []
    # vLLM's defaults (max_num_batched_tokens, gpu_memory_utilization 0.92) are left out
    assert out["serve_command"] == ("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 "
                                    "--block-size 128 --gpu-memory-utilization 0.9")


def test_too_little_memory_is_refused_with_the_longest_that_fits():
    model = configs.catalog_model("Llama-3.1-8B")
    setup = deployment.Setup(gpu_bytes=24 * 10**9, gpu_name="L4", max_model_len=131_072)
    plan = deployment.plan_setup(model, setup)
    refusal = will_start.memory_refusal(plan, setup, "")
    v = plan.vllm
    assert refusal.message.startswith("To serve at least one request with the model's max seq len (131072), (16.0 GiB")
    assert f"estimated maximum model length is {v.longest_max_model_len}" in refusal.message
    assert refusal.fix == f"--max-model-len {v.longest_max_model_len}"


@pytest.mark.slow
def test_page_will_it_start_on_cpu():
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.query_params.update(plan_context="2000")
    at.run()
    at.radio(key="plan_platform").set_value("cpu")
    at.run()
    assert not at.exception
    assert any(h.value == "Will it start?" for h in at.subheader)
    codes = [c.value for c in at.code]
    assert "No common block size for 16 (CPU_ATTN: [MultipleOf(32)])." in codes
    assert any(c.startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct") for c in codes)
