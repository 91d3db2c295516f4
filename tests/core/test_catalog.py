"""The shipped catalogs (assets/models.json, assets/gpus.json) are well-formed published data.

Every model config must build with transformers' own config class (a typo in a field name or a
model_type transformers does not know fails here), every entry names its source, no name or
alias is used twice, and every GPU's memory and bandwidth agree with their byte fields. The
catalog's readers and look-ups (kvviz.core.catalog) find an entry by any of its names, case and
punctuation ignored, and a preset's device bytes fall back to its marketed bytes.
"""
from __future__ import annotations

import json

import pytest
import transformers
from transformers import AutoConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from kvviz.core import assets, catalog

ASSETS = assets.FOLDER
GB = 1_000_000_000

REQUIRED_MODELS = [
    "DeepSeek-V3", "Kimi-K2", "Qwen3-0.6B", "Qwen3-1.7B", "Qwen3-4B", "Qwen3-8B", "Qwen3-14B",
    "Qwen3-32B", "Qwen3-30B-A3B", "Qwen3-235B-A22B", "Qwen3-Next-80B-A3B", "gpt-oss-20b",
    "gpt-oss-120b", "Gemma-3-1B", "Gemma-3-4B", "Gemma-3-12B", "Gemma-3-27B", "Llama-3.3-70B",
    "Llama-4-Scout", "Llama-4-Maverick", "Mistral-7B-v0.1", "Mistral-Small-3-24B", "Phi-4",
    "SmolLM3-3B", "Granite-4.0-H-Tiny",
    # kept from the first catalog
    "SmolLM2-135M", "SmolLM2-360M", "SmolLM2-1.7B", "Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.2-1B",
    "Llama-3.2-3B", "Mistral-7B-v0.3", "Qwen2.5-0.5B", "Qwen2.5-1.5B", "Qwen2.5-7B", "Qwen2.5-14B",
    "Qwen2.5-32B", "Qwen2.5-72B", "Gemma-2-2B", "Gemma-2-9B", "Gemma-2-27B", "Phi-3-mini-4k", "GPT-2",
    "GPT-2-XL",
]
REQUIRED_GPUS = [
    "H200", "H100 SXM", "A100 80GB", "A100 40GB", "L40S", "L4", "RTX 4090", "T4", "B200", "GB200", "B300",
    "MI300X", "MI325X", "MI355X", "H20", "RTX 5090", "RTX PRO 6000", "A10G",
]


def _load(name: str, key: str) -> list[dict]:
    return json.loads((ASSETS / name).read_text(encoding="utf-8"))[key]


MODELS = _load("models.json", "models")
GPUS = _load("gpus.json", "gpus")


def _key(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _config_class(config: dict):
    """transformers' config class for a published config: by model_type, or, for remote-code
    types transformers lacks (Kimi K2's "kimi_k2"), by the architecture class it names."""
    if config["model_type"] in CONFIG_MAPPING:
        return CONFIG_MAPPING[config["model_type"]]
    (architecture,) = config["architectures"]
    return getattr(transformers, architecture).config_class


@pytest.mark.parametrize("entry", MODELS, ids=[m["name"] for m in MODELS])
def test_model_config_builds_with_transformers(entry):
    config = entry["config"]
    cls = _config_class(config)
    kwargs = {k: v for k, v in config.items() if k != "model_type"}
    built = AutoConfig.for_model(cls.model_type, **kwargs)
    text = built.get_text_config()
    assert text.num_hidden_layers > 0 and text.num_attention_heads > 0
    for field in ("num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size"):
        published = config.get("text_config", config).get(field)
        if published is not None:  # the built config keeps the published value, not a default
            assert getattr(text, field) == published, field


def test_models_are_named_sourced_and_counted():
    assert len(MODELS) >= len(REQUIRED_MODELS)
    names = {m["name"] for m in MODELS}
    assert set(REQUIRED_MODELS) <= names, set(REQUIRED_MODELS) - names
    for entry in MODELS:
        assert entry["hf_id"].count("/") == 1, entry["name"]
        assert entry["source"].strip(), entry["name"]
        assert "INTERIM" not in entry["source"], entry["name"]
        assert isinstance(entry["num_parameters"], int) and entry["num_parameters"] > 0
        active = entry.get("num_active_parameters")
        if active is not None:
            assert isinstance(active, int) and 0 < active < entry["num_parameters"], entry["name"]


def test_moe_models_publish_their_active_parameters():
    moe_fields = ("n_routed_experts", "num_experts", "num_local_experts")
    for entry in MODELS:
        config = entry["config"].get("text_config", entry["config"])
        if any(config.get(f) for f in moe_fields):
            assert entry.get("num_active_parameters"), entry["name"]


def test_no_noise_fields_in_configs():
    for entry in MODELS:
        for config in (entry["config"], entry["config"].get("text_config", {})):
            assert not {"auto_map", "torch_dtype"} & set(config), entry["name"]


def test_quantized_checkpoints_keep_their_quantization_config():
    """The weights' stored format is kept (and cited) where the checkpoint ships one."""
    methods = {e["name"]: e["config"].get("quantization_config", {}).get("quant_method") for e in MODELS}
    assert methods["gpt-oss-120b"] == methods["gpt-oss-20b"] == "mxfp4"
    assert methods["DeepSeek-V3"] == methods["Kimi-K2"] == "fp8"
    for entry in MODELS:
        if "quantization_config" in entry["config"]:
            assert "quantization_config" in entry["source"], entry["name"]


def _names(entries: list[dict], *fields: str) -> list[str]:
    keys = []
    for entry in entries:
        own = {_key(entry[f]) for f in fields if entry.get(f)} | {_key(a) for a in entry.get("aliases", [])}
        keys.extend(own)
    return keys


def test_no_duplicate_model_names_or_aliases():
    keys = _names(MODELS, "name", "hf_id")
    assert len(keys) == len(set(keys)), sorted(k for k in set(keys) if keys.count(k) > 1)


def test_gpus_have_consistent_memory_and_bandwidth():
    names = {g["name"] for g in GPUS}
    assert set(REQUIRED_GPUS) <= names, set(REQUIRED_GPUS) - names
    for gpu in GPUS:
        assert gpu["memory_gb"] > 0 and gpu["bandwidth_gb_per_s"] > 0, gpu["name"]
        assert gpu["memory_bytes"] == round(gpu["memory_gb"] * GB), gpu["name"]
        assert gpu["bandwidth_bytes_per_s"] == round(gpu["bandwidth_gb_per_s"] * GB), gpu["name"]
        assert gpu["source"].strip(), gpu["name"]
    keys = _names(GPUS, "name")
    assert len(keys) == len(set(keys)), sorted(k for k in set(keys) if keys.count(k) > 1)


def test_new_gpu_presets_carry_their_datasheet_figures():
    expected = {  # (GB, GB/s) as their sources state them; GB200 and B300 are per GPU
        "B200": (180, 8000), "GB200": (186, 8000), "B300": (288, 8000), "MI300X": (192, 5300),
        "MI325X": (256, 6000), "MI355X": (288, 8000), "H20": (96, 4000), "RTX 5090": (32, 1792),
        "RTX PRO 6000": (96, 1792), "A10G": (24, 600),
    }
    by_name = {g["name"]: g for g in GPUS}
    for name, (gb, gb_per_s) in expected.items():
        gpu = by_name[name]
        assert (gpu["memory_gb"], gpu["bandwidth_gb_per_s"]) == (gb, gb_per_s), name


def test_look_ups_find_an_entry_by_any_of_its_names():
    assert catalog.load_catalog() == _load("models.json", "models") and catalog.load_gpus() == _load("gpus.json", "gpus")
    smollm = catalog.find_catalog_entry("SmolLM2-135M")
    assert catalog.find_catalog_entry("huggingfacetb/smollm2-135m-INSTRUCT") == smollm  # by hf_id, any case
    assert catalog.find_catalog_entry("default") == smollm  # by alias
    assert smollm["hf_id"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and catalog.find_catalog_entry("no such") is None
    assert catalog.catalog_config(smollm) is smollm["config"] and catalog.catalog_config({"a": 1}) == {"a": 1}
    h100 = catalog.find_gpu("h100 sxm")
    assert h100["name"] == "H100 SXM" and catalog.find_gpu("H100-80GB") == h100 and catalog.find_gpu("H1000") is None


def test_a_preset_s_device_bytes_fall_back_to_its_marketed_bytes():
    h100 = catalog.find_gpu("H100 SXM")
    assert catalog.device_bytes(h100) == h100["device_bytes"] != h100["memory_bytes"]
    assert catalog.device_note(h100) == "a published torch figure"
    custom = {"name": "custom", "memory_bytes": 24 * GB}
    assert catalog.device_bytes(custom) == 24 * GB and catalog.device_note(custom) == "marketed; no device figure found"
