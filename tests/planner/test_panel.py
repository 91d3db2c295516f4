"""The capacity planner page (kvviz.planner.panel, drawn by app_pages/planner.py) via AppTest: its
figures by default, its widgets and URL settings, pasted configs, serving-setup controls and the
sentences it adds when vLLM would refuse or nothing fits. Hand arithmetic: test_frames.py."""
import json

import pytest

from kvviz.core.units import fmt_bytes
from kvviz.planner import capacity, panel
from kvviz.planner import frames as pf
from tests.planner.test_frames import SMOLLM2_CONFIG, make_plan, metrics, page
from tests.planner.test_vllm_log import CLUB_3090, QWEN3_14B


def test_a_pasted_logs_release_is_read_only_where_kvviz_models_it():
    """The vLLM version option follows a pasted log that prints its release (CLUB_3090: 0.24.0,
    V1); a log without one, an empty box, or a release older than 0.6 leave it alone."""
    assert panel.log_release(CLUB_3090) == ("0.24.0", "V1")
    assert panel.log_release(QWEN3_14B) == (None, None) and panel.log_release("  ") == (None, None)
    old = CLUB_3090.replace("(v0.24.0)", "(v0.5.3)")
    assert old != CLUB_3090 and panel.log_release(old) == (None, None)


@pytest.mark.slow
def test_page_default_catalog_model():
    at = page()
    assert not at.exception and not at.error
    values = metrics(at)
    # the preset plans at the bytes an H100 reports, 81,090 MiB = 85,029,027,840 B (not 80e9):
    # budget 0.9 × 85,029,027,840 − 16,060,522,496 = 60,465,602,560 B; ÷ 131,072·T B per request
    assert values["Requests that fit at 2,000 tokens"] == "230"
    assert values["KV per token"] == "128 KiB"
    assert values["Decode step ≥ (batch 1)"] == "4.56 ms"
    assert values["Requests of 2,000 tokens (whole blocks)"] == "230"
    assert any(h.value == "As vLLM would allocate it" for h in at.subheader)
    sentence = "At 500 / 2,000 / 8,000 tokens: 922 / 230 / 57 requests fit at once."
    assert any(h.value == sentence for h in at.subheader)
    assert len(at.get("vega_lite_chart")) == 3  # the curve, the what-ifs' bytes and their fits
    table = next(d.value for d in at.dataframe if "max_concurrent_requests" in d.value.columns)
    assert list(table["max_concurrent_requests"]) == [922, 230, 57]  # shown as "%,d"
    # 60,465,602,560 // 2,097,152 B per block = 28,832 blocks; ÷ 32 / 125 / 500 blocks per request
    assert list(table["vllm_requests_per_replica"]) == [901, 230, 57]
    assert list(table["kv_bytes_per_request"]) == ["62.5 MiB", "250 MiB", "1,000 MiB"]
    labels = [b.label for b in at.get("download_button")]
    assert labels.count("PNG") == 2 and labels.count("SVG") == 2 and labels.count("CSV") >= 4
    assert "lower bound" in at.markdown[-1].value


@pytest.mark.slow
def test_page_widgets_change_the_plan():
    at = page()
    at.selectbox(key="plan_model").select("SmolLM2-135M")
    at.selectbox(key="plan_gpu").select("H200")
    at.number_input(key="plan_context").set_value(8000)
    at.run()
    assert not at.exception
    values = metrics(at)
    assert values["KV per token"] == "22.5 KiB"  # 23,040 B, as measured in DESIGN.md
    assert "Requests that fit at 8,000 tokens" in values
    assert "kernel launches" in at.markdown[-1].value


@pytest.mark.slow
def test_page_reads_its_settings_from_the_url():
    at = page(plan_model="Qwen2.5-7B", plan_gpu="A100 40GB", plan_kv_dtype="int4",
              plan_context="8000", plan_batch="8")
    assert not at.exception
    assert at.selectbox(key="plan_model").value == "Qwen2.5-7B"
    assert at.number_input(key="plan_batch").value == 8
    a100 = capacity.find_gpu("A100 40GB")
    a100 = {**a100, "memory_bytes": 42_298_834_944}  # the preset's device bytes, as the page plans
    plan = make_plan("Qwen2.5-7B", a100, kv_dtype="int4", context_tokens=8000, batch=8)
    expected = {m.label: m.value for m in pf.headline_metrics(plan, fmt_bytes)}
    assert metrics(at) == expected


@pytest.mark.slow
def test_page_ignores_unknown_url_values():
    at = page(plan_model="no-such-model", plan_kv_dtype="fp3")
    assert not at.exception
    assert at.selectbox(key="plan_model").value == "Llama-3.1-8B"
    assert at.selectbox(key="plan_kv_dtype").value == "bf16"


@pytest.mark.slow
def test_page_custom_gpu_without_bandwidth():
    at = page(plan_gpu="Custom", plan_gpu_gb="24", plan_bandwidth_gbs="0")
    assert not at.exception
    assert len(at.metric) == 4 + 4  # memory and vLLM's figures, no speed bounds
    assert any("No bandwidth" in i.value for i in at.info)
    assert "Give the GPU's bandwidth" in at.markdown[-1].value


@pytest.mark.slow
def test_page_pasted_config():
    at = page(plan_source="Paste config.json")
    assert not at.exception and any("Paste the contents" in i.value for i in at.info)
    at.text_area(key="plan_config").input(SMOLLM2_CONFIG)
    at.run()
    assert not at.exception and not at.error
    assert metrics(at)["KV per token"] == "22.5 KiB"
    assert not any("Parameter count unknown" in w.value for w in at.warning)  # meta-device count
    unknown = json.dumps({"model_type": "my-own-arch", "num_hidden_layers": 30,
                          "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64})
    at.text_area(key="plan_config").input(unknown)
    at.run()
    assert any("Parameter count unknown" in w.value for w in at.warning)
    at.number_input(key="plan_params_b").set_value(0.135)
    at.run()
    assert not at.exception and not any("Parameter count unknown" in w.value for w in at.warning)
    assert metrics(at)["KV per token"] == "22.5 KiB"
    rendered = " ".join(e.value for e in [*at.markdown, *at.caption])
    assert "bold" not in rendered  # the pasted _name_or_path is never shown


@pytest.mark.slow
def test_page_pasted_config_errors_are_plain_messages():
    at = page(plan_source="Paste config.json")
    at.text_area(key="plan_config").input('{"num_hidden_layers": 30,')
    at.run()
    assert not at.exception
    assert "not valid JSON" in at.error[0].value.replace("\\", "") and not at.metric
    at.text_area(key="plan_config").input('{"num_hidden_layers": "[x](https://e.com)", '
                                          '"num_attention_heads": 9, "head_dim": 64}')
    at.run()
    assert not at.exception
    shown = at.error[0].value.replace("\\", "")  # Markdown escapes (ui.inert)
    assert "num_hidden_layers" in shown and "e.com" not in shown
    at.text_area(key="plan_config").input('{"num_hidden_layers": 30, "hidden_size": 576}')
    at.run()
    assert "num_attention_heads" in at.error[0].value.replace("\\", "")


@pytest.mark.slow
def test_page_warns_when_nothing_fits_and_past_max_position():
    at = page(plan_model="Llama-3.1-70B", plan_gpu="L4", plan_context="200000")
    assert not at.exception
    warnings = " ".join(w.value for w in at.warning)
    assert "no request fits" in warnings and "longer than the model was trained for" in warnings
    assert metrics(at)["Requests that fit at 200,000 tokens"] == "0"


@pytest.mark.slow
def test_page_serving_setup_controls():
    at = page(plan_model="Llama-3.1-70B", plan_context="8000")
    at.number_input(key="plan_tp").set_value(8)
    at.number_input(key="plan_dp").set_value(2)
    at.number_input(key="plan_prefix").set_value(1000)
    at.number_input(key="plan_offload_gb").set_value(200.0)
    at.selectbox(key="plan_block_size").select(128)
    at.number_input(key="plan_max_model_len").set_value(32_768)
    at.run()
    assert not at.exception and not at.error
    values = metrics(at)
    assert values["Requests that fit at 8,000 tokens"] == "179"  # at the H100's device bytes
    assert values["Whole deployment (16×H100 SXM, TP 8 · DP 2)"] == "358"
    assert "Max concurrency at 32,768 tokens" in values
    infos = " ".join(i.value for i in at.info)
    assert "Modelled" in infos and "whole blocks of 128" in infos and "CPU tier" in infos


@pytest.mark.slow
def test_page_impossible_tp_is_a_message():
    at = page(plan_model="Llama-3.1-70B", plan_tp="3")
    assert not at.exception
    assert "TP 3 does not divide" in at.error[0].value.replace("\\", "") and not at.metric


def starts_at_32k(at) -> bool:
    """With max_model_len set to 32,768 the page no longer says vLLM would refuse to start."""
    at.number_input(key="plan_max_model_len").set_value(32_768)
    at.run()
    return not any("refuse to start" in w.value for w in at.warning)


@pytest.mark.slow
def test_page_warns_when_vllm_would_refuse_to_start():
    at = page(plan_model="Llama-4-Scout", plan_tp="4")  # max_position_embeddings 10,485,760
    assert not at.exception
    assert any("vLLM would refuse to start" in w.value for w in at.warning)
    assert starts_at_32k(at)


@pytest.mark.slow
def test_page_plans_gpt_oss_120b_on_one_h100_as_served():
    """Hopper holds the MXFP4 experts in the Triton kernel's layout (64.4 GiB loaded in vllm#33155):
    at 131,072 tokens vLLM refused (vllm#23278, #27508), at 32,768 it starts."""
    at = page(120, plan_model="gpt-oss-120b", plan_gpu="H100 SXM")  # first build of a 117B MoE
    assert not at.exception and not at.error
    line = next(c.value.replace("\\", "") for c in at.caption if c.value.startswith("Per GPU"))
    assert "weights 69.31 GB (mxfp4 experts + bf16)" in line and "GiB" not in line
    # vllm#27508's release and flags (a link carrying one turns vLLM's budget on): refused at 131,072
    at = page(120, plan_model="gpt-oss-120b", plan_gpu="H100 SXM", plan_gpu_memory_utilization="0.95",
              plan_vllm_version="0.11")
    assert not at.exception and at.toggle(key="plan_vllm_budget").value
    assert any("Planned for vLLM 0.11: V1 0.8–0.16 rules." in c.value.replace("\\", "") for c in at.caption)
    assert any("refuse to start" in w.value for w in at.warning)
    assert starts_at_32k(at)


@pytest.mark.slow
def test_page_says_what_would_fit():
    at = page(120, plan_model="gpt-oss-120b", plan_gpu="H100 SXM", plan_weight_dtype="bf16")
    assert not at.exception
    # 234 GB of bf16 weights: the load fails, "Will it start?" names the change that starts it
    assert any("TP 4 (4 GPUs) is the smallest that starts it" in c.value.replace("\\", "") for c in at.caption)
    assert any("vLLM would not start" in e.value for e in at.error)


@pytest.mark.slow
def test_page_bandwidth_sentence_follows_the_models_own_bound():
    small = page().markdown[-1].value  # SmolLM2-135M on an H100: launching as long as reading
    big = page(120, plan_model="DeepSeek-V3", plan_gpu="H200", plan_tp="8").markdown[-1].value
    assert "**both**" in small and "Reading and launching take similar time" in small
    assert "**kernel launches**" in big and "kernels take to launch" in big  # 61 layers' launches
    assert "Reading and launching take similar time" not in big
    assert "kernels take to launch" not in small  # each page tells its own model's story
