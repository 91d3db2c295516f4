"""The planner's words and tables chosen by the numbers: the in-flight reservation named when it is
what cuts vLLM's count, the chosen context in the table and the curve (log axis across decades),
one rounding for page and CLI, nothing shown as a fit when the weights are unknown."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from kvviz.planner import configs, deployment, words
from kvviz.planner import charts as planner_charts
from kvviz.planner import cli as plan_cli
from kvviz.planner import frames as pf

PAGE = str(Path(__file__).resolve().parents[2] / "app_pages" / "planner.py")
H100 = dict(gpu_bytes=81_090 * 2**20, bandwidth_bytes_per_s=3.35e12)


def plan_of(name: str, **kw) -> pf.Plan:
    return pf.Plan(configs.catalog_model(name), deployment.Setup(**{**H100, **kw}))


def cli_json(*argv: str) -> dict:
    parser = argparse.ArgumentParser(prog="kvviz")
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["plan", *argv, "--json"])
    return plan_cli.build_plan(args).to_json()


def test_the_in_flight_reservation_is_named_when_it_cuts_the_count():
    plan = plan_of("gpt-oss-120b", context_tokens=2000)
    v, plain = plan.result.vllm, plan.result.plain.requests_per_replica
    assert v.requests_at_context_per_replica < 0.75 * plain  # vLLM fits far fewer
    note = pf.in_flight_note(plan)
    assert note and "16,384 tokens that may be in flight" in note and "not rounding" in note
    assert pf.in_flight_note(plan_of("Llama-3.1-8B", context_tokens=2000)) is None  # no window: no note
    assert words.in_flight_sentence(v, v.requests_at_context_per_replica, True) is None  # no cut


def test_table_and_curve_include_the_chosen_context():
    plan = plan_of("Llama-3.1-8B", context_tokens=131_072)
    assert list(pf.context_table_frame(plan)["context_tokens"]) == [500, 2000, 8000, 131_072]
    odd = plan_of("Llama-3.1-8B", context_tokens=3_000)
    assert 3_000 in set(pf.fit_curve_frame(odd, 16_384)["context_tokens"])


def test_the_curve_axis_is_log_across_decades_and_whole_numbers_always():
    plan = plan_of("Llama-3.1-8B", context_tokens=131_072)
    vega = planner_charts.fit_curve_chart(pf.fit_curve_frame(plan), 131_072).to_dict()
    y = vega["layer"][0]["encoding"]["y"]
    assert y["scale"]["type"] == "symlog" and y["axis"] == {"format": ",d", "values": [0, 1, 10, 100, 1000]}
    flat = pd.DataFrame({"context_tokens": [256, 512], "kv_bytes_per_request": [1, 2],
                         "max_concurrent_requests": [0, 0], "vllm_requests_per_replica": [0, 0]})
    y = planner_charts.fit_curve_chart(flat, 256).to_dict()["layer"][0]["encoding"]["y"]
    assert "type" not in y["scale"] and y["axis"] == {"format": ",d", "tickMinStep": 1}  # never 0.000000


def test_unknown_weights_show_no_fit_in_the_cli():
    out = cli_json("--layers", "4", "--kv-heads", "2", "--head-dim", "64")
    assert out["weight_params_known"] is False
    parser = argparse.ArgumentParser(prog="kvviz")
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    text = plan_cli.format_plan(plan_cli.build_plan(parser.parse_args(
        ["plan", "--layers", "4", "--kv-heads", "2", "--head-dim", "64", "--context", "2000"])))
    row = next(line for line in text.splitlines() if line.lstrip().startswith("2,000"))
    assert row.split()[3:] == ["–"] * 6  # fit, as vLLM, in all, step, tok/s, tok/s
    assert "Give it with --params" in text and "will it start: – " in text


@pytest.mark.slow
def test_page_table_rounds_as_the_cli_and_hides_fits_without_weights():
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.query_params.update(plan_model="Llama-3.1-8B", plan_context="2000")
    at.run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if "max_concurrent_requests" in d.value.columns)
    cli = {r["context_tokens"]: r for r in cli_json("Llama-3.1-8B", "--context", "500,2000,8000")["rows"]}
    for _, row in table.iterrows():
        theirs = cli[row["context_tokens"]]
        assert row["max_concurrent_requests"] == theirs["max_concurrent_requests"]
        assert row["tokens_per_s_per_request_ceiling"] == float(f"{theirs['tokens_per_s_per_request_ceiling']:.0f}")
        assert row["tokens_per_s_aggregate_ceiling_at_max"] == float(
            f"{theirs['tokens_per_s_aggregate_ceiling_at_max']:.0f}")
    unknown = AppTest.from_file(PAGE, default_timeout=60)
    unknown.query_params.update(plan_source="Paste config.json",
                                plan_config=json.dumps({"model_type": "nobody-knows", "num_hidden_layers": 2,
                                                        "num_attention_heads": 4, "hidden_size": 256}))
    unknown.run()
    assert not unknown.exception
    values = {m.label: m.value for m in unknown.metric}
    assert values["Requests that fit at 2,000 tokens"] == "–"
    assert not any(h.value == "Will it start?" for h in unknown.subheader)


# --- where a prefix hit lands (issue 42) ---------------------------------------------------------
def test_the_planner_says_which_shared_prefix_never_hits_and_the_cli_says_the_same():
    plan = plan_of("Llama-3.1-8B", block_size=16)
    v = plan.result.vllm
    assert (v.hit_block, v.group_block_sizes) == (16, ())
    sentence = words.prefix_hit_sentence(v)
    assert "a shared prefix shorter than 16 tokens never hits on this setup" in sentence
    assert sentence.startswith("Modelled: ")
    text = plan_cli.format_plan(plan_cli.build_plan(_cli_args("Llama-3.1-8B", "--gpu", "H100 SXM", "--block-size", "16")))
    assert sentence in text  # the page's caption and the CLI's line are one sentence
    off = plan_of("Llama-3.1-8B", block_size=16, prefix_caching=False).result.vllm
    assert words.prefix_hit_sentence(off) == "Modelled: prefix caching is off on this setup, so vLLM reuses no prefix."


def _cli_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kvviz")
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["plan", *argv])


def test_a_hit_comes_in_the_lcm_of_the_groups_blocks_and_the_prefix_what_if_shares_only_those():
    from kvviz.planner import serving_plan as sp
    alloc = sp.Allocation(num_blocks=1, num_tokens=1, max_concurrency=1.0, block_size=32, page_bytes=1, num_groups=2,
                          group_size=1, blocks_per_request=1, layout="hybrid", group_block_sizes=(32, 96))
    assert alloc.hit_block == 96  # vLLM's scheduler_block_size: math.lcm over the groups
    # a Mamba hybrid: its attention block grows until a page holds the state (hundreds of tokens)
    plan = plan_of("Granite-4.0-H-Tiny", block_size=16, prefix_tokens=1000)
    hit = plan.result.vllm.hit_block
    assert hit > 16 and hit == plan.result.vllm.block_size
    assert plan.result.prefix.shared_tokens == 1000 // hit * hit and plan.result.prefix.hit_block == hit
    assert f"in whole blocks of {hit:,})" in words.what_if_sentences(plan.result)[0]
