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


def _json(capsys, *argv) -> dict:
    parser = argparse.ArgumentParser(prog="kvviz")
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    assert plan_cli.run(parser.parse_args(["plan", *argv, "--json"])) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("argv", [
    ("Llama-3.1-8B", "--block-size", "16", "--platform", "cpu", "--gpu-gb", "64"),
    ("Llama-3.1-70B", "--gpu", "H100"),
    ("Llama-3.1-8B", "--gpu", "H100", "--kv-cache-memory-bytes", str(200 * 2**30)),
    ("gpt-oss-20b", "--gpu", "H100", "--gpu-memory-utilization", "0.95", "--max-model-len", "8192"),
    ("Llama-3.1-8B", "--gpu", "H100", "--context", "2000"),
])
def test_json_never_lists_a_refusal_beside_starts_true(capsys, argv):
    out = _json(capsys, *argv)
    starts = out["deployment"]["vllm"]["starts"]
    assert starts == (not out["refusals"]) == (out["start"] != "refused")
    assert starts == (not out["deployment"]["start"]["failures"])


def test_weights_alone_over_the_gpu_fail_at_load_with_no_speed_bounds(capsys):
    """Llama-3.1-70B in bf16 (131 GiB) on one H100: the load fails before any KV figure is printed."""
    out = _json(capsys, "Llama-3.1-70B", "--gpu", "H100")
    assert [r["kind"] for r in out["refusals"]] == ["weights_load"]
    assert "TP 4 (4 GPUs) is the smallest that starts it" in out["refusals"][0]["fix"]
    parser = argparse.ArgumentParser(prog="kvviz")
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    plan_cli.run(parser.parse_args(["plan", "Llama-3.1-70B", "--gpu", "H100"]))
    text = capsys.readouterr().out
    assert "no decode-speed bounds: vLLM would not start" in text and "tok/s" not in text.split("as vLLM")[0]
    assert "CUDA out of memory while loading the weights" in text


def test_a_given_kv_cache_of_200_gib_on_one_h100_does_not_start(capsys):
    out = _json(capsys, "Llama-3.1-8B", "--gpu", "H100", "--kv-cache-memory-bytes", str(200 * 2**30))
    assert out["start"] == "refused" and out["refusals"][0]["kind"] == "kv_given_too_large"


def test_every_suggested_change_is_replanned_and_starts():
    """vllm#13061: two RTX 4090 at TP 2 refused 131,072 tokens; the weaker (driver) rank held 81,536.
    kvviz's suggested max_model_len keeps its margin and starts when re-planned; the warm-up's
    suggested --max-num-seqs does too (gpt-oss-20b at 0.95 on one H100, llm-d-planner's v0.19 log)."""
    from tests.planner import startups
    runs = {r["id"]: r for r in startups.runs()}
    run = runs["vllm13061-0.7-r1-distill-qwen-14b-2x4090-tp2"]
    model, setup = configs.catalog_model(run["catalog"]), startups.setup(run)
    plan = deployment.plan_setup(model, setup)
    [refusal] = will_start.refusals(plan, setup, deployment.fit_advice(model, setup), model=model)
    suggested = int(refusal.fix.split()[1])
    assert suggested <= 81_536 < plan.vllm.longest_max_model_len  # what the weaker rank held
    assert deployment.plan_setup(model, deployment.replace(setup, max_model_len=suggested)).start.starts
    run = runs["llmd-0.19-gpt-oss-20b-tp1"]
    model, setup = configs.catalog_model(run["catalog"]), startups.setup(run)
    plan = deployment.plan_setup(model, setup)
    [refusal] = will_start.refusals(plan, setup, "", model=model)
    assert refusal.kind == "warmup" and refusal.fix.startswith("--max-num-seqs ")
    seqs = int(refusal.fix.split()[1])
    assert deployment.plan_setup(model, deployment.replace(setup, max_num_seqs=seqs)).start.starts


def test_quantizing_the_weights_keeps_embeddings_and_lm_head_in_16_bits(capsys):
    """vLLM's int8 / fp8 checkpoints quantize the decoder's linear layers only: Llama-3.1-8B in fp8
    is 8.49 GiB as vLLM loads it (llm-d-planner v0.19 log, --quantization fp8), not 7.5."""
    fp8 = _json(capsys, "Llama-3.1-8B", "--gpu", "H100", "--weight-dtype", "fp8")
    assert abs(fp8["weight_bytes"] / 2**30 - 8.49) < 0.05
    int8 = _json(capsys, "Llama-3.1-70B", "--gpu", "H100", "--tp", "2", "--weight-dtype", "int8")
    tables = 2 * 128_256 * 8192  # input embedding and LM head: 2 B each, as vLLM keeps them
    linear = int8["weight_params"] - tables
    assert int8["deployment"]["weights"]["weight_dtype"] == "int8 linear layers + bf16 embeddings, LM head and norms"
    assert abs(int8["weight_bytes"] - (2 * tables + linear * 1.0625)) < 0.001 * int8["weight_bytes"]
