"""The planner's result records (kvviz.planner.results): a start verdict's word, and plans and context
rows as the JSON `kvviz plan --json` gives (what-ifs left out unless asked about, bandwidth flattened)."""
from __future__ import annotations

from kvviz.planner import configs, deployment
from kvviz.planner.results import StartCheck, StartVerdict, plan_json, row_json
from tests.planner.test_deployment import setup


def test_a_verdict_is_refused_on_any_failure_at_risk_on_a_risk_alone():
    fail, risk = StartCheck("no_kv_memory", 10, 5), StartCheck("kv_margin", 5, 6)
    assert (StartVerdict().word, StartVerdict().starts) == ("starts", True)
    assert (StartVerdict(risks=(risk,)).word, StartVerdict(risks=(risk,)).starts) == ("at risk", True)
    refused = StartVerdict(failures=(fail,), risks=(risk,))
    assert (refused.word, refused.starts) == ("refused", False)


def test_plan_json_leaves_out_the_what_ifs_not_asked_about():
    model = configs.catalog_model("SmolLM2-135M")
    plain = plan_json(deployment.plan_setup(model, setup()))
    assert not {"prefix", "offload", "vllm_budget"} & set(plain)
    assert plain["label"] == "1×H100 SXM" and plain["per_gpu"]["kv_bytes_per_token"] == 23_040  # bf16
    asked = plan_json(deployment.plan_setup(model, setup(prefix_tokens=1000, offload_bytes=10**9)))
    assert asked["prefix"]["shared_tokens"] == 992 and "offload" in asked  # 62 whole 16-token blocks


def test_a_context_row_carries_its_bandwidth_figures_flat_or_none():
    model = configs.catalog_model("SmolLM2-135M")
    (row,) = deployment.context_rows(model, setup(), [1000])
    flat = row_json(row)
    assert "bandwidth" not in flat and flat["context_tokens"] == 1000
    assert flat["decode_step_floor_s"] == row.bandwidth.decode_step_floor_s > 0
    (bare,) = deployment.context_rows(model, setup(bandwidth_bytes_per_s=None), [1000])
    assert row_json(bare) == {k: v for k, v in flat.items() if k in row_json(bare)}
    assert "decode_step_floor_s" not in row_json(bare)
