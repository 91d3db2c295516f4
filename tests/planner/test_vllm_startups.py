"""kvviz's budget and start-up verdict on every published vLLM start-up of
tests/planner/data/vllm_startups.json (the planner's proof; docs/planner.md carries the table,
`python -m tests.planner.startups` prints it)."""
from __future__ import annotations

import functools
import statistics

import pytest

from tests.planner import startups

# what kvviz achieves on the table (docs/planner.md, "Validation"): a new run or a change to the
# budget that moves these is a change to the table and to that section
MAX_ABS_ERROR_PCT = 3.5  # the worst run: gemma-3-27b, its vision tower weighed 0.35 GiB light
MAX_MEDIAN_ERROR_PCT = 1.0


@functools.cache
def _table() -> tuple[startups.Figures, ...]:
    return tuple(startups.figures(run) for run in startups.runs())


def test_the_table_is_wide_enough_to_prove_something():
    runs = startups.runs()
    assert len(runs) >= 30
    assert len({r["vllm_version"] for r in runs}) >= 3
    assert {r["vllm_version"].split(".")[1] for r in runs} >= {"6", "7", "19"}  # V0 and V1 releases
    assert any(r["tp"] > 1 for r in runs) and any(r["pp"] > 1 for r in runs)
    kinds = " ".join(r.get("kind", "") for r in runs)
    for kind in ("MoE", "multimodal", "quantized"):
        assert kind in kinds, kind
    assert {r["vllm"]["outcome"] for r in runs} >= {"started", "refused_kv", "refused_no_memory",
                                                   "failed_sampler_warmup"}


@pytest.mark.parametrize("run", startups.runs(), ids=lambda r: r["id"])
def test_every_run_cites_its_source_and_the_inputs_it_states(run):
    assert run["source"].strip() and run["version_evidence"].strip() and run["stated"].strip()
    for key in ("model", "catalog", "tp", "pp", "vllm_version", "weights", "kv_cache_dtype",
                "max_model_len", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens"):
        assert key in run, key  # null: the source does not state it, vLLM's default applies
    assert run.get("gpu") or run.get("gpu_name")
    assert run["vllm"]["outcome"]


@pytest.mark.parametrize("index", range(len(startups.runs())), ids=lambda i: startups.runs()[i]["id"])
def test_kvviz_agrees_with_vllm_on_each_run(index):
    row = _table()[index]
    assert row.agrees, (row.run_id, row.vllm_outcome, row.kvviz_verdict, row.kvviz_reasons)
    if row.error_pct is not None:
        assert abs(row.error_pct) <= MAX_ABS_ERROR_PCT, (row.run_id, row.vllm_kv_gib, row.kvviz_kv_gib)
    elif row.vllm_kv_gib is not None:  # vLLM's budget was negative: kvviz's is too, within 0.5 GiB
        assert row.kvviz_kv_gib < 0 and abs(row.kvviz_kv_gib - row.vllm_kv_gib) < 0.5
    if row.vllm_weights_gib is not None:  # vLLM's own weights figure, within 0.6 GiB per GPU
        assert abs(row.kvviz_weights_gib - row.vllm_weights_gib) < 0.6, row.run_id


def test_the_summary_docs_planner_md_quotes():
    table = _table()
    s = startups.summary(list(table))
    assert s["runs"] == len(table) and s["verdicts_agree"] == len(table)
    assert s["kv_compared"] >= 25
    assert s["median_abs_error_pct"] <= MAX_MEDIAN_ERROR_PCT
    assert s["worst_abs_error_pct"] <= MAX_ABS_ERROR_PCT
    assert statistics.median(abs(r.error_pct) for r in table if r.error_pct is not None) == s["median_abs_error_pct"]


def test_refusals_name_vllms_reason():
    """kvviz's first failure is the one vLLM's log names."""
    expected = {"refused_kv": "kv_too_small", "refused_no_memory": "no_kv_memory",
                "failed_sampler_warmup": "warmup"}
    for row in _table():
        if row.vllm_outcome in expected:
            assert row.kvviz_reasons[0] == expected[row.vllm_outcome], row.run_id
