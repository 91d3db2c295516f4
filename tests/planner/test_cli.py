"""`kvviz plan` through plan_cli.add_parser / plan_cli.run, as kvviz/cli.py wires it."""
from __future__ import annotations

import argparse
import json

import pytest

from kvviz.planner import cli as plan_cli

GPT2_CONFIG = {"model_type": "gpt2", "n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024}


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kvviz")
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["plan", *argv])


def run_json(capsys, *argv: str) -> dict:
    assert plan_cli.run(parse(*argv, "--json")) == 0
    return json.loads(capsys.readouterr().out)


def run_error(capsys, *argv: str) -> str:
    """Run expecting bad input: exit code 2 and exactly one line on stderr, no traceback."""
    assert plan_cli.run(parse(*argv)) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("kvviz plan: error:") and "\n" not in err and "Traceback" not in err
    assert captured.out == ""
    return err


def test_add_parser_sets_func():
    assert parse("gpt2").func is plan_cli.run


def test_catalog_name_text_table(capsys):
    assert plan_cli.run(parse("SmolLM2-135M")) == 0
    out = capsys.readouterr().out
    assert "23,040 B per token" in out  # 2 × 30 × 3 × 64 × 2
    assert "H100 SXM" in out and "requests that fit" in out
    assert "8,000" in out and "2,000" in out and "500" in out
    assert "as vLLM would allocate it" in out and "KV cache size" in out


def test_json_llama_8b_on_h100(capsys):
    plan = run_json(capsys, "Llama-3.1-8B", "--gpu", "H100 SXM")
    assert plan["kv_bytes_per_token"] == 131_072
    assert plan["weight_bytes"] == 16_060_522_496  # 8,030,261,248 params counted on meta × 2 B
    assert plan["params_source"] == "meta-device count"
    # the preset's device bytes, 81,090 MiB = 85,029,027,840 B (torch's total_memory, not 80e9):
    # (0.9 × 85,029,027,840 − 16,060,522,496) // (131,072 × T) for T = 500, 2,000, 8,000
    assert [r["max_concurrent_requests"] for r in plan["rows"]] == [922, 230, 57]
    assert plan["rows"][0]["decode_step_floor_s"] > 0
    assert plan["gpu"]["memory_bytes"] == 81_090 * 2**20
    assert plan["gpu"]["memory_source"] == "a published torch figure"


def test_config_json_path(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT2_CONFIG))
    plan = run_json(capsys, str(path), "--context", "1024")
    assert plan["kv_bytes_per_token"] == 36_864  # 2 × 12 × 12 × 64 × 2
    assert plan["rows"][0]["kv_bytes_per_request"] == 36_864 * 1_024
    assert plan["weight_params_known"] is True  # GPT-2 built on the meta device
    assert plan["weight_params"] == 124_439_808


def test_model_folder(tmp_path, capsys):
    folder = tmp_path / "my-gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(GPT2_CONFIG))
    plan = run_json(capsys, str(folder))
    assert plan["model"]["name"] == "my-gpt2" and plan["attention"] == "MHA"
    assert plan["model"]["layer_kinds"] == "12 × full"


def test_explicit_numbers_mqa(capsys):
    plan = run_json(capsys, "--layers", "32", "--kv-heads", "1", "--head-dim", "128", "--heads", "32",
                    "--gpu-gb", "24", "--params", "1000000000")
    assert plan["kv_bytes_per_token"] == 16_384  # 2 × 32 × 1 × 128 × 2
    assert plan["attention"] == "MQA"
    # 24e9 − 2.4e9 overhead − 2e9 weights = 19.6e9; at 8,000 tokens: 16,384 × 8,000 = 131,072,000
    # 19.6e9 / 131,072,000 = 149.5 → 149
    assert plan["rows"][-1]["max_concurrent_requests"] == 149
    assert "decode_step_floor_s" not in plan["rows"][0]  # custom GPU: bandwidth unknown
    assert plan["params_source"] == "given"


def test_contexts_repeatable_and_comma_separated(capsys):
    plan = run_json(capsys, "gpt2", "--context", "100,200", "--context", "300")
    assert [r["context_tokens"] for r in plan["rows"]] == [100, 200, 300]


def test_kv_dtype_int4_and_batch(capsys):
    plan = run_json(capsys, "SmolLM2-135M", "--kv-dtype", "int4", "--batch", "4", "--context", "2000")
    assert plan["kv_bytes_per_token"] == 6_480  # 11,520 values × (0.5 + 4 / 64)
    assert plan["rows"][0]["kv_bytes_for_batch"] == 4 * 6_480 * 2_000


def test_window_and_attention_what_ifs(capsys):
    plan = run_json(capsys, "Llama-3.1-8B", "--window", "1024", "--context", "8000")
    assert plan["rows"][0]["kv_bytes_per_request"] == 131_072 * 1_023  # W − 1 tokens kept
    plan = run_json(capsys, "Llama-3.1-8B", "--attention", "mha", "--context", "1")
    assert plan["kv_bytes_per_token"] == 524_288  # 2 × 32 × 32 × 128 × 2


def test_sliding_model_text_mentions_window(capsys):
    assert plan_cli.run(parse("Gemma-2-2B", "--gpu", "L4")) == 0
    assert "13 × sliding 4096, 13 × full" in capsys.readouterr().out


def test_list(capsys):
    assert plan_cli.run(parse("--list")) == 0
    out = capsys.readouterr().out
    assert "Llama-3.1-70B" in out and "H200" in out


def test_unknown_hub_id_names_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    err = run_error(capsys, "no-such-org/no-such-model")
    assert "'no-such-org/no-such-model'" in err and "local Hugging Face cache" in err


def test_config_missing_field(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"n_layer": 2, "n_embd": 64}))  # no model_type: generic fields
    assert "num_attention_heads" in run_error(capsys, str(path))


def test_invalid_json(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    assert "not valid JSON" in run_error(capsys, str(path))


def test_folder_without_config(tmp_path, capsys):
    assert "config.json" in run_error(capsys, str(tmp_path))


@pytest.mark.parametrize("argv, fragment", [
    (("gpt2", "--context", "abc"), "--context"),
    (("gpt2", "--context", "0"), "--context"),
    (("gpt2", "--gpu", "Voodoo5"), "unknown GPU"),
    (("gpt2", "--overhead", "1.5"), "--overhead"),
    (("gpt2", "--kv-dtype", "int3"), "int3"),
    (("gpt2", "--batch", "0"), "--batch"),
    (("gpt2", "--window", "0"), "--window"),
    (("--layers", "4"), "--kv-heads"),
    (("gpt2", "--layers", "4", "--kv-heads", "1", "--head-dim", "8"), "not both"),
    ((), "give a model"),
    (("Llama-3.1-70B", "--tp", "3"), "TP 3 does not divide the model's 64 attention heads"),
    (("Llama-3.1-70B", "--tp", "0"), "--tp"),
    (("Llama-3.1-70B", "--pp", "200"), "more stages than"),
    (("Llama-3.1-70B", "--block-size", "0"), "--block-size"),
    (("Llama-3.1-70B", "--prefix-tokens", "9000"), "shared prefix"),
    (("no-such-model-at-all",), "not a catalog name"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, fragment):
    assert fragment in run_error(capsys, *argv)


# ---------------------------------------------------------------- serving setups (issue 9)


def test_json_smollm2_matches_a_real_vllm(capsys):
    # SmolLM2 fp32, block 128: 1 GiB of KV pool. A custom GPU of G GB with weights
    # 134,515,008 × 4 B = 538,060,032 B and overhead 0 leaves exactly 2^30 B when
    # G × 1e9 = 2^30 + 538,060,032 = 1,611,801,856 B.
    plan = run_json(capsys, "SmolLM2-135M", "--gpu-gb", "1.611801856", "--overhead", "0",
                    "--kv-dtype", "fp32", "--weight-dtype", "fp32", "--block-size", "128",
                    "--max-model-len", "2048", "--context", "2048")
    vllm = plan["deployment"]["vllm"]
    assert plan["kv_budget_bytes"] == 2**30
    assert (vllm["num_blocks"], vllm["num_tokens"], vllm["max_concurrency"]) == (182, 23_296, 11.375)
    assert plan["rows"][0]["vllm_requests_per_replica"] == 11


def test_json_llama_70b_on_8_h100_tp8(capsys):
    plan = run_json(capsys, "Llama-3.1-70B", "--gpu", "H100", "--tp", "8", "--context", "8000")
    d = plan["deployment"]
    assert d["label"] == "8×H100 SXM, TP 8" and (d["tp"], d["pp"], d["dp"], d["gpus"]) == (8, 1, 1, 8)
    assert d["per_gpu"]["weight_bytes"] == 17_638_426_624  # 141,107,412,992 / 8
    # (0.9 × 85,029,027,840 − 17,638,426,624) // 327,680,000 (tests/planner/test_parallel.py at 80e9: 165)
    assert plan["rows"][0]["max_concurrent_requests"] == 179
    assert d["vllm"]["num_blocks"] == 89_855  # 58,887,698,432 // (80 layers × 1 × 128 × 2 × 2 B × 16)


def test_json_pp_dp_prefix_offload(capsys):
    plan = run_json(capsys, "Llama-3.1-70B", "--gpu", "H100", "--tp", "4", "--pp", "2", "--dp", "3",
                    "--context", "8000", "--prefix-tokens", "1000", "--offload-gb", "100")
    d = plan["deployment"]
    assert d["gpus"] == 24 and d["per_gpu"]["layers"] == 40
    assert plan["rows"][0]["requests_total"] == 3 * plan["rows"][0]["max_concurrent_requests"]
    assert d["prefix"]["requests_per_replica"] > d["plain"]["requests_per_replica"]
    assert d["offload"]["requests_kept_per_replica"] > d["plain"]["requests_per_replica"]


def test_json_moe_reads_active_weights(capsys):
    plan = run_json(capsys, "Qwen3-30B-A3B", "--gpu", "H100", "--context", "2000")
    assert plan["active_params"] < plan["weight_params"] / 5
    # the floor reads the active weights only: (3,353,032,704 × 2 B + 2,000 × 98,304 B) / 3.35e12
    floor = (plan["active_weight_bytes"] + 2000 * 98_304) / 3.35e12
    assert plan["rows"][0]["decode_step_floor_s"] == pytest.approx(floor)


def test_weights_sentence_words_dense_and_moe_apart(capsys):
    """A dense model's active count differs from its total only by the untied embedding table."""
    assert plan_cli.run(parse("Llama-3.1-8B", "--gpu", "H100", "--context", "2000")) == 0
    dense = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("weights "))
    assert "(every weight but the untied input embedding table, of which a token reads one row)" in dense
    assert "experts" not in dense
    assert plan_cli.run(parse("Qwen3-30B-A3B", "--gpu", "H100", "--context", "2000")) == 0
    moe = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("weights "))
    assert "(routed experts k of E; an untied embedding table not counted" in moe
    assert run_json(capsys, "Llama-3.1-8B", "--gpu", "H100")["deployment"]["weights"]["moe"] is False


def test_json_mla_and_hybrid(capsys):
    plan = run_json(capsys, "DeepSeek-V3", "--gpu", "H200", "--tp", "8", "--weight-dtype", "fp8")
    assert plan["attention"] == "MLA"
    assert plan["deployment"]["per_gpu"]["kv_bytes_per_token"] == 61 * 576 * 2  # on every rank
    plan = run_json(capsys, "Llama-4-Scout", "--gpu", "H100", "--tp", "4")
    assert plan["deployment"]["vllm"]["layout"] == "hybrid"
    assert plan["model"]["bytes_per_token_by_kind"] == {"chunked": 36 * 4096, "full": 12 * 4096}


def test_platform_and_prefix_caching_flags_reach_the_mamba_hybrid_plan(capsys):
    base = ("Qwen3-Next-80B-A3B", "--gpu", "H200", "--max-model-len", "8192")
    cuda = run_json(capsys, *base)["deployment"]["vllm"]
    cpu = run_json(capsys, *base, "--platform", "cpu")["deployment"]["vllm"]
    off = run_json(capsys, *base, "--no-prefix-caching")["deployment"]["vllm"]
    assert (cuda["platform"], cuda["prefix_caching"], off["prefix_caching"]) == ("CUDA", True, False)
    assert cpu["platform"] == "CPU"
    # bf16 state on CUDA: 544-token blocks (tests/planner/test_serving_plan.py); on the CPU backend a float32
    # state where the CPU has AVX-512 BF16: 32 × cdiv(2,146,304, 32 × 2,048) = 1,056, else bf16: 544
    from kvviz.planner import serving_plan
    assert (cuda["block_size"], cpu["block_size"]) == (544, 1056 if serving_plan.avx512_bf16() else 544)
    # prefix caching holds 2 pages per state group per request, off 1: 16 + 3 × 2 vs 16 + 3
    assert (cuda["blocks_per_request"], off["blocks_per_request"]) == (22, 19)
    assert off["num_blocks"] == cuda["num_blocks"]
    assert plan_cli.run(parse(*base, "--platform", "cpu")) == 0
    text = capsys.readouterr().out
    assert "as vLLM would allocate it on CPU" in text and "prefix caching on" in text


def test_json_int4_has_no_vllm_figures(capsys):
    plan = run_json(capsys, "SmolLM2-135M", "--kv-dtype", "int4")
    assert "int4" in plan["deployment"]["vllm"]["error"]
    assert plan["rows"][0]["vllm_requests_per_replica"] is None


def test_vllm_would_refuse_a_max_model_len_that_does_not_fit(capsys):
    assert plan_cli.run(parse("Llama-4-Scout", "--gpu", "H100", "--tp", "4")) == 0  # 10M positions
    out = capsys.readouterr().out
    assert "vLLM would refuse to start" in out and "The longest that fits is" in out
    plan = run_json(capsys, "Llama-4-Scout", "--gpu", "H100", "--tp", "4")
    longest = plan["deployment"]["vllm"]["longest_max_model_len"]
    assert plan["deployment"]["vllm"]["starts"] is False and 8192 < longest < 10_485_760
    fixed = run_json(capsys, "Llama-4-Scout", "--gpu", "H100", "--tp", "4", "--max-model-len", str(longest))
    assert fixed["deployment"]["vllm"]["starts"] is True


@pytest.mark.parametrize("entry", __import__("kvviz.planner.capacity").planner.capacity.load_catalog(),
                         ids=lambda e: e["name"])
def test_json_for_every_catalog_model(capsys, entry):
    plan = run_json(capsys, entry["name"], "--gpu-gb", "1500", "--weight-dtype", "fp8",
                    "--context", "4096", "--max-model-len", "32768")
    assert sum(plan["model"]["bytes_per_token_by_kind"].values()) == plan["kv_bytes_per_token"]
    assert plan["weight_params"] == pytest.approx(entry["num_parameters"], rel=0.2)
    vllm = plan["deployment"]["vllm"]
    assert vllm["num_blocks"] > 0 and vllm["num_tokens"] > 0
    assert plan["rows"][0]["max_concurrent_requests"] > 0
