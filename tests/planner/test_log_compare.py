"""A pasted vLLM log set beside kvviz's plan (kvviz.planner.log_compare): each figure's verdict,
within the log's rounding, on the published logs of test_vllm_log.py (parsing is tested there)."""
from __future__ import annotations

from kvviz.planner import configs, deployment, log_compare, parallel, vllm_log
from tests.planner.test_vllm_log import CLUB_3090, QWEN3_14B, QWEN3_235B


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


def test_the_comparison_fills_weights_and_reads_the_logs_release():
    rows = {r.figure: r for r in log_compare.compare(vllm_log.parse_log(QWEN3_14B),
                                                      configs.catalog_model("Qwen3-14B"), deployment.Setup())}
    assert rows["Weights per GPU"].kvviz.endswith("GiB") and rows["Weights per GPU"].vllm == "not in the log"
    assert rows["vLLM release"].vllm == "not in the log"
    club = {r.figure: r for r in log_compare.compare(vllm_log.parse_log(CLUB_3090),
                                                     configs.catalog_model("Qwen3-14B"), deployment.Setup())}
    assert club["vLLM release"].vllm == "0.24.0, V1 engine" and club["vLLM release"].kvviz.startswith("0.24.0")
