"""A pasted vLLM start-up log read for its KV figures (kvviz.planner.vllm_log) and set beside kvviz's
in the CLI and on the page, on published log lines (each fixture names where it was published);
the comparison's own verdicts: test_log_compare.py."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.app.ui import inert
from kvviz.planner import cli as plan_cli
from kvviz.planner import configs, deployment, log_compare, parallel, vllm_log

PAGE = str(Path(__file__).resolve().parents[2] / "app_pages" / "planner.py")

# vLLM 0.32's own one-line format (kv_cache_utils.update_kv_cache_capacity) with the figures of a
# published Qwen3-14B start-up, as quoted in issue 29 (6.51 GiB → 42,656 tokens, 1.30× at 32,768)
QWEN3_14B = """(EngineCore pid=1) INFO 11-02 10:00:01 [gpu_worker.py:760] Available KV cache memory: 6.51 GiB
(EngineCore pid=1) INFO 11-02 10:00:01 [kv_cache_utils.py:2328] GPU KV cache size: 42,656 tokens, Maximum concurrency for 32,768 tokens per request: 1.30x"""
# github.com/vllm-project/vllm/pull/13596 (the two-line format of early V1)
TWO_LINES = """INFO 02-19 23:56:55 kv_cache_utils.py:524] GPU KV cache size: 2,042,016 tokens
INFO 02-19 23:56:55 kv_cache_utils.py:527] Maximum concurrency for 2,048 tokens per request: 997.08x"""
# github.com/noonghunna/club-3090/issues/612 (vLLM 0.24, per-process prefixes, non-default args)
CLUB_3090 = """(APIServer pid=1) INFO 07-06 22:50:34 [api_utils.py:273] non-default args: {'model_tag': 'x', 'dtype': 'bfloat16', 'max_model_len': 131072, 'kv_cache_dtype': 'fp8', 'enable_prefix_caching': True, 'max_num_batched_tokens': 8192, 'max_num_seqs': 1}
(EngineCore pid=107) INFO 07-06 22:50:46 [core.py:114] Initializing a V1 LLM engine (v0.24.0) with config: model='x'
(EngineCore pid=107) INFO 07-06 22:52:09 [gpu_worker.py:508] Available KV cache memory: 5.98 GiB
(EngineCore pid=107) INFO 07-06 22:52:09 [kv_cache_utils.py:2146] GPU KV cache size: 567,978 tokens
(EngineCore pid=107) INFO 07-06 22:52:09 [kv_cache_utils.py:2147] Maximum concurrency for 131,072 tokens per request: 4.33x"""
# github.com/vllm-project/vllm/pull/14447 (V0's memory-profiling lines, one worker's)
V0_PROFILE = """(VllmWorkerProcess pid=507) INFO 04-12 08:21:19 [worker.py:267] the current vLLM instance can use total_gpu_memory (23.58GiB) x gpu_memory_utilization (0.99) = 23.35GiB
(VllmWorkerProcess pid=507) INFO 04-12 08:21:19 [worker.py:267] model weights take 21.21GiB; non_torch_memory takes 0.20GiB; PyTorch activation peak memory takes 0.37GiB; the rest of the memory reserved for KV Cache is 1.57GiB."""
# github.com/vllm-project/vllm/issues/21348 (Qwen3-235B-A22B-FP8 on 4 × H100)
QWEN3_235B = """Available KV cache memory: 8.11 GiB
GPU KV cache size: 178,880 tokens"""


def test_the_current_format_is_read():
    f = vllm_log.parse_log(QWEN3_14B)
    assert f.kv_memory_bytes == round(6.51 * 2**30) and f.kv_cache_tokens == 42_656
    assert (f.concurrency_tokens, f.max_concurrency, f.max_model_len) == (32_768, 1.30, 32_768)


def test_older_formats_are_read():
    two = vllm_log.parse_log(TWO_LINES)
    assert (two.kv_cache_tokens, two.max_concurrency, two.concurrency_tokens) == (2_042_016, 997.08, 2_048)
    club = vllm_log.parse_log(CLUB_3090)
    assert (club.kv_cache_tokens, club.max_model_len, club.kv_cache_dtype, club.vllm_version) == (
        567_978, 131_072, "fp8", "0.24.0")
    assert club.kv_memory_bytes == round(5.98 * 2**30) and club.max_concurrency == 4.33
    v0 = vllm_log.parse_log(V0_PROFILE)
    assert v0.gpu_memory_utilization == 0.99 and v0.total_gpu_bytes == round(23.58 * 2**30)
    assert (v0.weights_bytes, v0.non_torch_bytes, v0.activation_peak_bytes, v0.kv_memory_bytes) == tuple(
        round(g * 2**30) for g in (21.21, 0.20, 0.37, 1.57))


def test_a_log_without_kv_figures_or_too_long_is_one_sentence():
    with pytest.raises(vllm_log.LogError, match="no KV cache figures found"):
        vllm_log.parse_log("INFO starting <b>server</b>")
    with pytest.raises(vllm_log.LogError, match="reads up to 200,000"):
        vllm_log.parse_log("x" * (vllm_log.MAX_LOG_CHARS + 1))


def test_cli_prints_the_log_beside_the_plan(tmp_path, capsys):
    log = tmp_path / "vllm.log"
    log.write_text(QWEN3_14B)
    parser = argparse.ArgumentParser(prog="kvviz")
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    assert plan_cli.run(parser.parse_args(["plan", "Qwen3-14B", "--vllm-log", str(log), "--json"])) == 0
    rows = {r["figure"]: r for r in json.loads(capsys.readouterr().out)["vllm_log"]}
    assert rows["KV cache size (tokens)"]["vllm"] == "42,656"
    assert rows["KV cache size (tokens)"]["verdict"].startswith("agrees")
    assert plan_cli.run(parser.parse_args(["plan", "Qwen3-14B", "--vllm-log", str(tmp_path / "no.log")])) == 2
    assert "--vllm-log: cannot read" in capsys.readouterr().err


@pytest.mark.slow
def test_page_pasted_log_table_equals_the_cli():
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.query_params.update(plan_model="Qwen3-14B")
    at.run()
    at.text_area(key="plan_vllm_log").input(QWEN3_14B)
    at.run()
    assert not at.exception and not at.error
    table = next(t.value for t in at.table if "vLLM's log" in t.value.columns)  # wrapped, never cut
    shown = dict(zip(table.index, table["kvviz"]))
    assert list(table.columns) == ["vLLM's log", "kvviz", "difference"]
    rows = log_compare.compare(vllm_log.parse_log(QWEN3_14B), configs.catalog_model("Qwen3-14B"),
                               deployment.Setup(gpu_bytes=81_090 * 2**20, bandwidth_bytes_per_s=3.35e12))
    assert shown == {r.figure: r.kvviz for r in rows}
    # a log that says its release: the page plans for it (the version left "as the pasted log says")
    at.text_area(key="plan_vllm_log").input(CLUB_3090)
    at.run()
    assert any("Planned for vLLM 0.24.0 (the pasted log's): V1 0.21 on rules." in c.value.replace("\\", "")
               for c in at.caption)
    at.text_area(key="plan_vllm_log").input("<script>alert(1)</script> no figures")
    at.run()
    assert [e.value for e in at.warning] == [inert(
        "Cannot compare: no KV cache figures found: paste the lines vLLM prints at start-up, "
        "'Available KV cache memory: … GiB' and 'GPU KV cache size: … tokens'.")]


# The wordings issue 38 found the reader dropping. Each fixture keeps the lines vLLM prints in the
# format of the release named, with the figures of the published log cited.
# github.com/vllm-project/vllm/issues/23278 (gpt-oss-120b on one H100, vLLM 0.10: Marlin MXFP4)
NEGATIVE_V1 = """(EngineCore_0 pid=5839) INFO 08-20 18:04:10 [gpu_model_runner.py:2007] Model loading took 65.9651 GiB and 12.799889 seconds
(EngineCore_0 pid=5839) INFO 08-20 18:04:22 [gpu_worker.py:276] Available KV cache memory: -2.14 GiB
(EngineCore_0 pid=5839) ERROR 08-20 18:04:22 [core.py:700] EngineCore failed to start."""
# github.com/vllm-project/vllm/issues/13882 (Qwen2.5-7B bnb 4-bit on an 8 GB RTX 4060, vLLM 0.7.3)
V0_NO_BLOCKS = """INFO 02-26 10:00:00 llm_engine.py:234] Initializing a V0 LLM engine (v0.7.3.dev233+gad5a35c2) with config: model='Qwen2.5-7B-Instruct-bnb-4bit', max_seq_len=4096, quantization=bitsandbytes
INFO 02-26 10:00:10 worker.py:267] the current vLLM instance can use total_gpu_memory (8.00GiB) x gpu_memory_utilization (0.70) = 5.60GiB
INFO 02-26 10:00:10 worker.py:267] model weights take 5.20GiB; non_torch_memory takes 0.03GiB; PyTorch activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is -1.05GiB.
INFO 02-26 10:00:10 executor_base.py:111] # cuda blocks: 0, # CPU blocks: 4681
INFO 02-26 10:00:10 executor_base.py:116] Maximum concurrency for 4096 tokens per request: 0.00x
ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."""
# github.com/vllm-project/vllm/issues/10517 (Llama-3.1-8B on an RTX 3090, vLLM 0.6.4, --max-model-len 29k)
V0_REFUSED = """INFO 12-02 10:00:00 worker.py:232] Memory profiling results: total_gpu_memory=23.58GiB peak_torch_memory=17.98GiB non_torch_memory=0.35GiB kv_cache_size=2.89GiB gpu_memory_utilization=0.90
INFO 12-02 10:00:00 model_runner.py:1077] Loading model weights took 14.9888 GB
INFO 12-02 10:00:01 distributed_gpu_executor.py:57] # GPU blocks: 1478, # CPU blocks: 2048
ValueError: The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache (23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."""
# github.com/vllm-project/vllm/issues/27508 (gpt-oss-120b on one H100, the reporter's second try):
# the start-up ends in torch's out-of-memory error inside vLLM's sampler, 1,024 rows × 201,088 logits
# in float32 (786 MiB), after the CUDA graphs ("private pools")
OOM_SAMPLER = """(EngineCore_DP0 pid=8884)   File "/opt/conda/envs/vllm_env/lib/python3.13/site-packages/vllm/v1/sample/sampler.py", line 86, in forward
(EngineCore_DP0 pid=8884)     logits = logits.to(torch.float32)
(EngineCore_DP0 pid=8884) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB. GPU 0 has a total capacity of 79.11 GiB of which 140.75 MiB is free."""
# github.com/vllm-project/vllm/issues/33155 (gpt-oss-120b on one H100, vLLM 0.14.1): the weights
# loaded; the issue reports an out-of-memory error after them (the error line here is constructed:
# torch's wording, as above)
LOADED = "(EngineCore_DP0 pid=70073) INFO 01-27 00:31:59 [gpu_model_runner.py:3905] Model loading took 64.38 GiB memory and 14.380607 seconds"
TORCH_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


def test_a_negative_budget_is_read_as_negative():
    f = vllm_log.parse_log(NEGATIVE_V1)
    assert f.kv_memory_bytes == -round(2.14 * 2**30) and f.weights_bytes == round(65.9651 * 2**30)
    rows = {r.figure: r for r in log_compare.compare(f, configs.catalog_model("gpt-oss-120b"),
                                                      deployment.Setup(vllm_version="0.10.1"))}
    assert rows["KV cache memory per GPU"].vllm == "-2.14 GiB"
    # vLLM raises "No available memory for the cache blocks" on a budget ≤ 0 (the log stops before)
    assert rows["Start-up"].vllm == "failed: no memory for the cache blocks"
    assert rows["Start-up"].verdict == "agrees", rows["Start-up"]


def test_v0_cuda_blocks_and_its_no_memory_refusal_are_read():
    f = vllm_log.parse_log(V0_NO_BLOCKS)
    assert (f.num_blocks, f.kv_memory_bytes, f.failure) == (0, -round(1.05 * 2**30), "no_kv_memory")
    assert (f.vllm_version, f.vllm_engine, f.max_model_len) == ("0.7.3", "V0", 4096)
    assert (f.gpu_memory_utilization, f.total_gpu_bytes) == (0.70, round(8 * 2**30))
    rows = {r.figure: r for r in log_compare.compare(f, configs.catalog_model("Qwen2.5-7B"),
                                                      deployment.Setup(weight_dtype="int4"))}
    assert rows["vLLM release"].vllm == "0.7.3, V0 engine"
    assert rows["Start-up"].vllm == "failed: no memory for the cache blocks"
    assert rows["Start-up"].kvviz.startswith("refused: no_kv_memory") and rows["Start-up"].verdict == "agrees"


def test_v0_one_line_profile_and_its_max_seq_len_refusal_are_read():
    f = vllm_log.parse_log(V0_REFUSED)
    assert f.kv_memory_bytes == round(2.89 * 2**30) and f.num_blocks == 1478
    assert (f.failure, f.refused_tokens, f.max_model_len) == ("kv_too_small", 23_648, 29_000)
    assert f.activation_peak_bytes == round(17.98 * 2**30) - round(14.9888 * 2**30)
    setup = deployment.Setup(gpu_name="RTX 3090", gpu_bytes=round(23.58 * 2**30), vllm_version="0.6.4")
    rows = {r.figure: r for r in log_compare.compare(f, configs.catalog_model("Llama-3.1-8B"), setup)}
    assert rows["Start-up"].verdict == "agrees" and rows["Start-up"].kvviz.startswith("refused: kv_too_small")
    # a term within the log's rounding agrees (it read "differs by -0.00 GiB")
    assert rows["Non-torch memory"].verdict == "agrees (within the log's 0.01 GiB rounding)"
    # V0 reports blocks × block size: 1,478 × 16 = 23,648 tokens, the refusal's own figure
    assert rows["KV cache size (tokens)"].vllm == "23,648"
    assert rows["KV cache size (tokens)"].verdict.startswith("agrees")


def test_a_log_ending_in_out_of_memory_keeps_what_it_printed_and_names_where():
    sampler = vllm_log.parse_log(OOM_SAMPLER)
    assert (sampler.failure, sampler.oom_bytes) == ("warmup", 786 * 2**20)
    assert sampler.failure_words == "out of memory warming up the sampler"
    loaded = vllm_log.parse_log(LOADED + "\n" + TORCH_OOM)
    assert loaded.weights_bytes == round(64.38 * 2**30) and loaded.oom_bytes == 2 * 2**30
    assert loaded.failure == "oom"  # after the weights, before any KV figure
    assert vllm_log.parse_log(TORCH_OOM).failure == "weights_load"  # nothing printed before it
    after_kv = NEGATIVE_V1.splitlines()[1].replace("-2.14", "3.10") + "\n" + TORCH_OOM
    assert vllm_log.parse_log(after_kv).failure == "oom_after_kv"
    warmup = ("RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. "
              "Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.")
    assert vllm_log.parse_log(warmup).failure == "warmup"


def test_several_workers_the_smallest_wins():
    """Constructed from vLLM's per-worker lines: every worker keeps the smallest worker's blocks."""
    log = "\n".join(f"(VllmWorker rank={i} pid={100 + i}) INFO 01-01 00:00:00 [gpu_worker.py:298] "
                    f"Available KV cache memory: {gib} GiB" for i, gib in enumerate(("8.69", "7.46")))
    f = vllm_log.parse_log(log)
    assert (f.kv_memory_bytes, f.workers) == (round(7.46 * 2**30), 2)
    rows = {r.figure: r for r in log_compare.compare(f, configs.catalog_model("Qwen2.5-14B"), deployment.Setup(
        par=parallel.Parallel(2, 1, 1)))}
    assert rows["KV cache memory per GPU"].vllm == "7.46 GiB (smallest of 2 workers)"


@pytest.mark.slow
def test_hosted_caps_apply_to_the_settings_a_pasted_log_states(monkeypatch):
    """A log's max_model_len (or TP × PP) over the hosted caps is not planned: one sentence."""
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.run()
    at.text_area(key="plan_vllm_log").input(QWEN3_14B.replace("32,768 tokens per request", "10,485,760 tokens per request"))
    at.run()
    assert not at.exception
    assert [w.value for w in at.warning if "Cannot compare" in w.value] == [inert(
        "Cannot compare: the log's max_model_len is 10,485,760; this hosted kvviz allows 1,048,576: "
        "kvviz plans the pasted log's settings under the same caps.")]
    assert not [t for t in at.table if "vLLM's log" in t.value.columns]
