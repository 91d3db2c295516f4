"""A pasted vLLM start-up log read for its KV figures and set beside kvviz's, on published log
lines (each fixture names where it was published)."""
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


def test_qwen3_14b_log_agrees_with_kvvizs_blocks():
    """6.51 GiB ÷ (40 layers × 8 heads × 128 × 2 × 2 B × 16) = 2,666 blocks = 42,656 tokens."""
    rows = {r.figure: r for r in log_compare.compare(vllm_log.parse_log(QWEN3_14B),
                                                      configs.catalog_model("Qwen3-14B"),
                                                      deployment.Setup(gpu_bytes=81_090 * 2**20))}
    assert rows["KV cache size (tokens)"].verdict.startswith("agrees")
    # 6.505 / 6.515 GiB (the log's rounding) → 2,664 / 2,668 blocks; 6.51 GiB itself → 2,666 blocks
    assert rows["KV cache size (tokens)"].kvviz == "42,624–42,688"
    assert rows["Maximum concurrency at 32,768 tokens"].verdict.startswith("agrees")
    # the run's GPU and utilization are not in these lines: kvviz's budget for an H100 at vLLM's
    # default differs, and says by how much
    assert rows["KV cache memory per GPU"].verdict.startswith("kvviz has +")


def test_a_log_that_disagrees_is_named_with_the_difference():
    setup = deployment.Setup(gpu_bytes=81_090 * 2**20, par=parallel.Parallel(4, 1, 1), weight_dtype="fp8")
    rows = {r.figure: r for r in log_compare.compare(vllm_log.parse_log(QWEN3_235B),
                                                      configs.catalog_model("Qwen3-235B-A22B"), setup)}
    tokens = rows["KV cache size (tokens)"]
    assert tokens.vllm == "178,880" and tokens.verdict.startswith("differs by -")  # vLLM has fewer


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
    table = next(d.value for d in at.dataframe if "vLLM's log" in d.value.columns)
    shown = dict(zip(table["figure"], table["kvviz"]))
    rows = log_compare.compare(vllm_log.parse_log(QWEN3_14B), configs.catalog_model("Qwen3-14B"),
                               deployment.Setup(gpu_bytes=81_090 * 2**20, bandwidth_bytes_per_s=3.35e12))
    assert shown == {r.figure: r.kvviz for r in rows}
    at.text_area(key="plan_vllm_log").input("<script>alert(1)</script> no figures")
    at.run()
    assert [e.value for e in at.warning] == [inert(
        "Cannot compare: no KV cache figures found: paste the lines vLLM prints at start-up, "
        "'Available KV cache memory: … GiB' and 'GPU KV cache size: … tokens'.")]
