"""Capacity planner: frames against hand-computed numbers, charts' Vega-Lite, and the page beside the CLI
(the page alone: test_panel.py).

Hand arithmetic used below (GB = 1e9 B):
  Llama-3.1-8B: 32 layers × 8 KV heads × head_dim 128 → 2·32·8·128 = 65,536 values per token,
  131,072 B in bf16. Weights 8,030,261,248 params × 2 B = 16,060,522,496 B.
  On an H100 (80e9 B, 3.35e12 B/s) with 10 % overhead (8e9 B) the KV budget is
  80e9 − 16,060,522,496 − 8e9 = 55,939,477,504 B. At T tokens a request needs 131,072·T B:
  T = 500 → 65,536,000 B → 853 requests; 2,000 → 262,144,000 B → 213; 8,000 → 1,048,576,000 B
  → 53; 1,024 → 416; 4,096 → 104 (= 416 / 4: quadruple the context, quarter the users).
  A decode step reads every weight but the untied embedding table (128,256 × 4,096 = 525,336,576
  params; a token reads one row): 7,504,924,672 × 2 B = 15,009,849,344 B.
  Decode step floor at T = 2,000, batch 1: (15,009,849,344 + 262,144,000) / 3.35e12 = 4.5588 ms.
"""
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.core.errors import UserError
from kvviz.planner import capacity, deployment, parallel, words
from kvviz.planner import configs as plan_models
from kvviz.planner import charts as planner_charts
from kvviz.planner import frames as pf
from kvviz.core.units import fmt_bytes

PAGE = str(Path(__file__).resolve().parents[2] / "app_pages" / "planner.py")
H100 = capacity.find_gpu("H100 SXM")
BUDGET = 80 * 10**9 - 16_060_522_496 - 8 * 10**9
SMOLLM2_CONFIG = json.dumps({  # HuggingFaceTB/SmolLM2-135M-Instruct config.json, abridged
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
    "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
    "max_position_embeddings": 8192, "_name_or_path": "**bold** <b>x</b>"}, indent=1)


def make_plan(model="Llama-3.1-8B", gpu=H100, **kw) -> pf.Plan:
    args = dict(gpu_name=gpu["name"], gpu_bytes=gpu["memory_bytes"],  # marketed: the hand sums above
                bandwidth_bytes_per_s=gpu["bandwidth_bytes_per_s"], context_tokens=2000)
    model = plan_models.catalog_model(model) if isinstance(model, str) else model
    return pf.Plan(model, deployment.Setup(**{**args, **kw}))


def llama8b_plan(**kw) -> pf.Plan:
    return make_plan(**kw)


# ---------------------------------------------------------------- frames


def test_plan_budget_matches_hand_arithmetic():
    plan = llama8b_plan()
    assert plan.weight_bytes == 16_060_522_496
    assert plan.overhead_bytes == 8 * 10**9
    assert plan.kv_budget_bytes == BUDGET == 55_939_477_504


def test_context_table_and_sentence():
    table = pf.context_table_frame(llama8b_plan())
    assert list(table["context_tokens"]) == [500, 2000, 8000]
    assert list(table["kv_bytes_per_request"]) == [65_536_000, 262_144_000, 1_048_576_000]
    assert list(table["max_concurrent_requests"]) == [853, 213, 53]
    # vLLM: pages of 16 tokens × 2,048 values × 2 B = 65,536 B; 55,939,477,504 // 65,536 // 32
    # = 26,674 blocks; a request holds cdiv(T, 16) blocks: 500 → 32, 2,000 → 125, 8,000 → 500
    assert list(table["vllm_requests_per_replica"]) == [833, 213, 53]
    assert table["decode_step_floor_ms"][1] == pytest.approx(4.5588, abs=1e-4)
    assert table["tokens_per_s_per_request_ceiling"][1] == pytest.approx(1 / 4.5588e-3, rel=1e-4)
    assert pf.context_sentence(table) == "At 500 / 2,000 / 8,000 tokens: 853 / 213 / 53 requests fit at once."


def test_context_table_without_bandwidth_has_no_time_columns():
    table = pf.context_table_frame(llama8b_plan(bandwidth_bytes_per_s=None))
    assert list(table.columns) == ["context_tokens", "kv_bytes_per_request", "max_concurrent_requests",
                                   "vllm_requests_per_replica", "requests_total"]


def test_curve_contexts_are_log_spaced_and_cover_the_range():
    points = pf.curve_contexts(131_072)
    assert points[0] == 256 and points[-1] == 131_072
    assert points == sorted(set(points))
    assert {256, 512, 1024, 4096, 16_384, 65_536} <= set(points)  # every doubling is sampled
    assert len(points) == 9 * pf.CURVE_POINTS_PER_OCTAVE + 1
    assert pf.curve_contexts(1000)[-1] == 1000  # the end is kept when it is not a sample


def test_fit_curve_quadruple_the_context_quarter_the_users():
    df = pf.fit_curve_frame(llama8b_plan()).set_index("context_tokens")
    assert df.index.max() == 131_072  # the model's max_position_embeddings
    assert df.loc[1024, "max_concurrent_requests"] == 416
    assert df.loc[4096, "max_concurrent_requests"] == 104
    assert df.loc[1024, "kv_bytes_per_request"] == 131_072 * 1024
    assert df["max_concurrent_requests"].is_monotonic_decreasing


def test_fit_curve_flattens_past_a_sliding_window():
    plan = make_plan("Mistral-7B-v0.1", bandwidth_bytes_per_s=None)  # window 4,096 on all 32 layers
    df = pf.fit_curve_frame(plan).set_index("context_tokens")
    assert df.loc[4096, "kv_bytes_per_request"] == df.loc[32_768, "kv_bytes_per_request"]
    assert df.loc[4096, "max_concurrent_requests"] == df.loc[32_768, "max_concurrent_requests"]


def test_curve_max_context_defaults_and_extends_to_t():
    plan = make_plan(capacity.uniform_model(2, 1, 64, 1), context_tokens=500)
    assert pf.curve_max_context(plan) == pf.DEFAULT_MAX_CONTEXT
    assert pf.curve_max_context(llama8b_plan(context_tokens=500_000)) == 500_000


def test_what_if_frame_hand_computed():
    df = pf.what_if_frame(llama8b_plan(), window=1024).set_index("variant")
    assert list(df.columns) == [c for c in pf.WHAT_IF_COLUMNS if c != "variant"]
    per_token = df["kv_bytes_per_token"]
    assert per_token["MHA: 32 KV heads"] == 2 * 32 * 32 * 128 * 2 == 524_288
    assert per_token["as configured (GQA): 8 KV heads"] == 131_072
    assert per_token["MQA: 1 KV head"] == 16_384
    assert per_token["KV fp32"] == 262_144 and per_token["KV fp8"] == 65_536
    assert per_token["KV int8"] == 65_536 * 1.0625 == 69_632  # + 4 B per 64 values
    assert per_token["KV int4"] == 65_536 * 0.5625 == 36_864
    assert df.loc["window 1,024 on all layers", "kv_bytes_per_request"] == 131_072 * 1023
    assert df.loc["window 1,024 on all layers", "max_concurrent_requests"] == BUDGET // (131_072 * 1023)
    assert df.loc["MQA: 1 KV head", "max_concurrent_requests"] == BUDGET // (16_384 * 2000)
    assert df.reset_index().groupby("group")["current"].sum().to_dict() == {
        "attention": 1, "KV dtype": 1, "sliding window": 1}
    assert df.index.is_unique and list(df["order"]) == list(range(len(df)))


def test_what_if_window_rows_for_a_model_that_has_one():
    df = pf.what_if_frame(make_plan("Gemma-2-9B", bandwidth_bytes_per_s=None, context_tokens=8000), 4096)
    windows = df[df["group"] == "sliding window"]
    assert list(windows["variant"]) == ["no window",
                                        "window 4,096 on 21 of 42 layers (as configured)",
                                        "window 4,096 on all layers"]
    assert list(windows["current"]) == [False, True, False]
    assert windows["kv_bytes_per_request"].is_monotonic_decreasing


def test_headline_metrics():
    labels = [m.label for m in pf.headline_metrics(llama8b_plan(), fmt_bytes)]
    assert labels[:4] == ["KV per token", "KV per request at 2,000 tokens",
                          "Requests that fit at 2,000 tokens", "Weights per GPU"]
    values = {m.label: m.value for m in pf.headline_metrics(llama8b_plan(batch=4), fmt_bytes)}
    assert values["KV per token"] == "128 KiB" and values["Requests that fit at 2,000 tokens"] == "213"
    assert values["Decode step ≥ (batch 4)"] == pf.fmt_seconds(
        (15_009_849_344 + 4 * 262_144_000) / 3.35e12)
    # vLLM: 55,939,477,504 // 65,536 B pages // 32 layers = 26,674 blocks of 16 tokens
    assert values["KV blocks per GPU"] == "26,674"
    assert values["Tokens that fit (vLLM)"] == "426,784"
    assert values["Max concurrency at 131,072 tokens"] == "3.256×"  # 26,674 / 8,192
    assert values["Requests of 2,000 tokens (whole blocks)"] == "213"  # 26,674 // 125
    assert len(pf.speed_metrics(llama8b_plan(bandwidth_bytes_per_s=None))) == 0
    assert all(m.help for m in pf.headline_metrics(llama8b_plan(), fmt_bytes))  # each explained


def test_deployment_metrics_and_what_if_sentences():
    plan = make_plan("Llama-3.1-70B", context_tokens=8000, par=parallel.Parallel(8, 1, 2),
                     prefix_tokens=1000, offload_bytes=200 * 10**9)
    values = {m.label: m.value for m in pf.memory_metrics(plan, fmt_bytes)}
    assert values["Requests that fit at 8,000 tokens"] == "165"  # tests/planner/test_parallel.py
    assert values["Whole deployment (16×H100 SXM, TP 8 · DP 2)"] == "330"
    sentences = words.what_if_sentences(plan.result)
    assert "Modelled" in sentences[0] and "992 tokens in whole blocks of 16" in sentences[0]
    assert "Modelled" in sentences[1] and "242 requests" in sentences[1]


def test_layer_kinds_and_vllm_frames():
    kinds = pf.layer_kinds_frame(make_plan("Gemma-2-9B", context_tokens=8000)).set_index("layer_kind")
    assert list(kinds["layers"]) == [21, 21]
    assert kinds.loc["sliding 4096", "kv_bytes_per_token"] == 21 * 8192
    assert kinds.loc["sliding 4096", "kv_bytes_per_request"] == 21 * 8192 * 4095
    assert kinds.loc["full", "kv_bytes_per_request"] == 21 * 8192 * 8000
    vllm = pf.vllm_frame(llama8b_plan()).set_index("figure")
    assert vllm.loc["num_gpu_blocks", "value"] == "26,674"
    assert pf.vllm_frame(llama8b_plan(kv_dtype="int4")).empty


def test_every_table_column_has_a_label_and_a_kind():
    frames = [pf.context_table_frame(llama8b_plan()), pf.what_if_frame(llama8b_plan(), 1024)]
    shown = {c for f in frames for c in f.columns} - {"order"}
    assert shown <= set(pf.TABLE_COLUMNS)
    kinds = {kind for _, kind in pf.TABLE_COLUMNS.values()}
    assert kinds <= {"count", "bytes", "ms", "ms2", "text", "flag"}
    assert pf.TABLE_COLUMNS["max_concurrent_requests"][1] == "count"  # thousands separators


def test_fmt_seconds():
    assert pf.fmt_seconds(56e-6) == "56 µs"
    assert pf.fmt_seconds(4.8724e-3) == "4.87 ms"
    assert pf.fmt_seconds(2.0) == "2.00 s"
    assert pf.fmt_seconds(None) == "–"


def test_launch_bound_small_model_vs_big_model():
    h200 = capacity.find_gpu("H200")
    small = pf.launch_bound(make_plan("SmolLM2-135M", h200, context_tokens=500))
    assert small["bound"] == "kernel launches"
    assert small["decode_step_floor_s"] < 1e-4 < small["launch_s"]  # ~57 µs vs ~4.5 ms
    assert small["num_kernels"] == 30 * pf.KERNELS_PER_LAYER
    big = pf.launch_bound(make_plan("Llama-3.1-70B", h200))
    assert big["bound"] == "memory bandwidth"
    close = pf.launch_bound(make_plan("Gemma-2-9B", context_tokens=8000))
    assert close["bound"] == "both"  # ~6 ms floor vs ~6.3 ms launching: too close to call
    assert pf.launch_bound(llama8b_plan(bandwidth_bytes_per_s=None)) is None


@pytest.mark.slow
def test_pasted_config_parses_like_the_catalog():
    model = pf.model_from_pasted_config(SMOLLM2_CONFIG)
    assert capacity.kv_bytes_per_token(model) == 23_040  # DESIGN.md: SmolLM2 in bf16
    assert model.name == pf.PASTED_NAME and model.params_source == "meta-device count"
    assert model.params_total > 0  # counted from the (abridged) config itself
    given = pf.model_from_pasted_config(SMOLLM2_CONFIG, params=134_515_008)
    assert given.weight_params == 134_515_008


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("{not json", "not valid JSON"),
    ('{"a": 1,}', "line 1"),
    ("[1, 2]", "not a JSON object"),
    ('{"num_hidden_layers": 30, "hidden_size": 576}', "num_attention_heads"),
    ('{"num_attention_heads": 9, "hidden_size": 576}', "num_hidden_layers"),
    ('{"num_hidden_layers": 30, "num_attention_heads": 9}', "head_dim"),
    ('{"model_type": "llama", "num_hidden_layers": 30, "num_attention_heads": 7, "hidden_size": 64}',
     "cannot be used"),
    ('{"num_hidden_layers": 0, "num_attention_heads": 9, "head_dim": 64}', "it is 0"),
    ('{"num_hidden_layers": 30.5, "num_attention_heads": 9, "head_dim": 64}', "fractional"),
    ('{"num_hidden_layers": true, "num_attention_heads": 9, "head_dim": 64}', "true/false"),
])
def test_pasted_config_errors_name_the_problem(text, message):
    with pytest.raises(pf.ConfigError, match=message):
        pf.model_from_pasted_config(text)


def test_pasted_config_errors_never_echo_the_pasted_text():
    evil = "![pic](https://example.com/x.png) <script>alert(1)</script> **bold**"
    for cfg in ({"num_hidden_layers": evil, "num_attention_heads": 9, "head_dim": 64},
                {"model_type": "llama", "num_hidden_layers": 30, "num_attention_heads": 7,
                 "hidden_size": 64, "name": evil, "_name_or_path": evil}):
        with pytest.raises(pf.ConfigError) as err:
            pf.model_from_pasted_config(json.dumps(cfg))
        assert "example.com" not in str(err.value) and "<" not in str(err.value)
        assert "*" not in str(err.value) and "[" not in str(err.value)


def test_planner_frames_imports():
    import ast
    for module in (pf, planner_charts):
        tree = ast.parse(Path(module.__file__).read_text())
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                 for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert names <= {"__future__", "json", "math", "collections.abc", "dataclasses", "pandas",
                         "altair", "kvviz", "kvviz.viz", "kvviz.planner", "kvviz.viz.charts", "kvviz.planner.capacity", "functools",
                         "kvviz.live.report", "vl_convert", "kvviz.core", "kvviz.core.errors"}, names


# ---------------------------------------------------------------- charts


def test_fit_curve_chart_vega():
    plan = llama8b_plan()
    df = pf.fit_curve_frame(plan)
    vega = planner_charts.fit_curve_chart(df, 2000, 256, 131_072).to_dict()
    json.dumps(vega)
    line, rule, label = vega["layer"]
    assert line["mark"]["type"] == "line" and rule["mark"]["type"] == "rule"
    x = line["encoding"]["x"]
    assert x["field"] == "context_tokens" and x["scale"]["type"] == "log"
    assert x["scale"]["domain"] == [256, 131_072]
    assert x["axis"]["values"] == [256, 1024, 4096, 16_384, 65_536, 131_072]  # ×4, and the end
    assert line["encoding"]["y"]["field"] == "requests"
    assert line["transform"][0]["fold"] == ["max_concurrent_requests", "vllm_requests_per_replica"]
    assert line["encoding"]["color"]["scale"]["domain"] == [planner_charts.PLAIN_LABEL,
                                                            planner_charts.VLLM_LABEL]
    assert vega["datasets"][rule["data"]["name"]] == [{"context_tokens": 2000, "label": "T = 2,000"}]
    assert vega["title"]["subtitle"] == "quadruple the context, quarter the users"
    assert label["mark"]["align"] == "left"  # T in the left half: label to the right of the rule
    right = planner_charts.fit_curve_chart(df, 100_000, 256, 131_072).to_dict()
    assert right["layer"][2]["mark"]["align"] == "right"
    rows = vega["datasets"][vega["data"]["name"]]
    assert len(rows) == len(df) and rows[0]["context_tokens"] == 256


def test_fit_curve_chart_without_marker_or_vllm_line():
    vega = planner_charts.fit_curve_chart(pf.fit_curve_frame(llama8b_plan())).to_dict()
    assert len(vega["layer"]) == 1
    int4 = pf.fit_curve_frame(llama8b_plan(kv_dtype="int4"))  # vLLM has no int4 cache
    assert planner_charts.fit_curve_chart(int4).to_dict()["layer"][0]["transform"][0]["fold"] == [
        "max_concurrent_requests"]


@pytest.mark.slow
def test_charts_download_as_png_and_svg():
    chart = planner_charts.what_if_chart(pf.what_if_frame(llama8b_plan(), 1024), 2000)
    assert planner_charts.chart_png(chart, scale=1).startswith(b"\x89PNG")
    assert "<svg" in planner_charts.chart_svg(chart)


@pytest.mark.slow
def test_what_if_chart_vega():
    df = pf.what_if_frame(llama8b_plan(), 1024)
    vega = planner_charts.what_if_chart(df, 2000).to_dict()
    json.dumps(vega)
    left, right = vega["vconcat"]  # stacked: side by side they were cut at 1280 px
    assert left["layer"][0]["encoding"]["x"]["field"] == "kv_bytes_per_request"
    assert right["layer"][0]["encoding"]["x"]["field"] == "max_concurrent_requests"
    bars = left["layer"][0]["encoding"]
    assert bars["y"]["field"] == "variant" and bars["y"]["sort"]["field"] == "order"
    assert bars["color"]["scale"]["domain"] == ["attention", "KV dtype", "sliding window"]
    assert right["layer"][0]["encoding"]["y"]["axis"]["labelLimit"] == 260  # each chart names its bars
    assert left["width"] == right["width"] == planner_charts.WHAT_IF_BARS_WIDTH
    assert len(vega["datasets"][vega["data"]["name"]]) == len(df)


# ---------------------------------------------------------------- the page


def page(timeout_s: float = 30, **query) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=timeout_s)
    at.query_params.update(query)
    return at.run()


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def test_a_what_if_window_of_one_token_is_one_sentence_not_a_division_by_zero():
    with pytest.raises(UserError, match="at least 2 tokens"):
        pf.what_if_frame(make_plan("Gemma-2-9B", bandwidth_bytes_per_s=None, context_tokens=8000), 1)
    assert len(pf.what_if_frame(make_plan("Gemma-2-9B", bandwidth_bytes_per_s=None, context_tokens=8000), 2))


def test_page_and_cli_show_memory_figures_in_one_unit(capsys):
    """Weights and the KV budget in GB on the page's metrics, its per-GPU line and the CLI alike;
    cache sizes in KiB / MiB on both (kvviz.core.units' policy)."""
    import argparse

    from kvviz.planner import cli as plan_cli
    from kvviz.core import units

    plan = llama8b_plan()
    values = {m.label: m for m in pf.memory_metrics(plan, fmt_bytes)}
    weights = values["Weights per GPU"].value
    assert weights == "16.06 GB" == units.fmt_bytes_si(plan.result.per_gpu.weight_bytes)
    assert "KV budget 55.94 GB per GPU" in values["Requests that fit at 2,000 tokens"].help
    parser = argparse.ArgumentParser(prog="kvviz")
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    assert plan_cli.run(parser.parse_args(["plan", "Llama-3.1-8B", "--gpu-gb", "80", "--bandwidth-gbs", "3350",
                                           "--context", "2000"])) == 0
    out = capsys.readouterr().out
    assert f"− weights {weights}" in out and "55.94 GB for KV caches" in out
    assert f" {values['KV per request at 2,000 tokens'].value} " in out  # 250 MiB on both


SAME_SETUPS = [  # (page query, `kvviz plan` arguments) for one setup
    (dict(plan_model="Llama-3.1-70B", plan_context="8000", plan_tp="8", plan_dp="2", plan_prefix="1000",
          plan_offload_gb="200"),
     ["Llama-3.1-70B", "--gpu", "H100 SXM", "--context", "8000", "--tp", "8", "--dp", "2",
      "--prefix-tokens", "1000", "--offload-gb", "200"]),
    (dict(plan_model="gpt-oss-120b", plan_weight_dtype="bf16"),
     ["gpt-oss-120b", "--gpu", "H100 SXM", "--context", "2000", "--weight-dtype", "bf16"]),
    (dict(plan_model="Llama-3.1-70B", plan_gpu="L4", plan_context="200000"),
     ["Llama-3.1-70B", "--gpu", "L4", "--context", "200000"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("query, argv", SAME_SETUPS, ids=["what-ifs", "vllm-refuses", "nothing-fits"])
def test_page_and_cli_say_the_same_sentences(capsys, query, argv):
    """Every planner sentence kvviz.planner.words words (the budget, the weights, the what-ifs,
    vLLM's refusal with what would fit, nothing fits, longer than trained) reads the same on the
    page and in `kvviz plan` for one setup."""
    import argparse

    from kvviz.planner import cli as plan_cli

    parser = argparse.ArgumentParser(prog="kvviz")
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["plan", *argv])
    assert plan_cli.run(args) == 0
    cli = capsys.readouterr().out
    built = plan_cli.build_plan(args)
    plan, model = built.deployment, plan_models.catalog_model(argv[0])
    expected = [words.budget_sentence(plan), words.weights_sentence(plan.weights),
                *words.what_if_sentences(plan)]
    if deployment.blocks_refused(plan):  # the blocks' sentence; other failures: "will it start"
        expected.append(words.refusal_sentence(plan.vllm, deployment.fit_advice(model, built.setup)))
    if plan.per_gpu.kv_budget_bytes == 0:
        expected.append(words.nothing_fits_sentence())
    for refusal in built.refusals:  # "will it start": vLLM's words and the re-planned change
        expected += [refusal.message, refusal.fix]
    if model.max_position and built.setup.context_tokens > model.max_position:
        expected.append(words.longer_than_trained_sentence([built.setup.context_tokens], model.max_position))
    at = page(120, **query)
    assert not at.exception
    shown = "\n".join(e.value.replace("\\", "") for kind in (at.caption, at.warning, at.info, at.code) for e in kind)
    assert len(expected) >= 3
    for sentence in expected:
        assert sentence in cli, sentence
        assert sentence in shown, sentence


@pytest.mark.slow
def test_page_says_the_in_flight_sentence_once():
    """gpt-oss-120b's sliding layers reserve blocks for the tokens in flight: said once, under the
    figures, not again in the metric's help (it was both)."""
    at = page(120, plan_model="gpt-oss-120b", plan_max_model_len="32768")
    assert not at.exception
    shown = [e.value for kind in (at.caption, at.info, at.warning) for e in kind]
    assert sum("reserves blocks for the" in text for text in shown) == 1, shown
