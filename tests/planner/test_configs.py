"""kvviz.planner.configs: catalog entries and pasted configs read into models (each layer's kind and
width from the config, a remote-code model type read by its architecture, saved infinities)."""
from __future__ import annotations

import pytest

from catalog_cases import first_of_each_type
from kvviz.core.errors import UserError
from kvviz.core.layout import config_from_dict
from kvviz.planner import capacity
from kvviz.planner import configs as plan_models


@pytest.mark.parametrize("entry", first_of_each_type(lambda e: e))  # make test: all; check: one per type
def test_every_catalog_model_bytes_per_layer_kind_from_its_config(entry):
    """For every catalog entry: attention layers cost 2 × kv_heads × head_dim, read from the
    config (its fields, or the config class's defaults where config.json leaves one out, e.g.
    Gemma 3's head_dim 256; MLA: kv_lora_rank + qk_rope_head_dim)."""
    model = plan_models.catalog_model(entry["name"])
    raw, _ = plan_models.resolve_model_type(capacity.catalog_config(entry))
    cfg = config_from_dict(raw).get_text_config(decoder=True)
    assert entry["source"] and model.max_position and model.num_layers == cfg.num_hidden_layers
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    per_layer = (cfg.kv_lora_rank + cfg.qk_rope_head_dim if getattr(cfg, "kv_lora_rank", None)
                 else 2 * kv_heads * head_dim)
    for spec in model.specs:
        if spec.kind in ("full", "sliding", "chunked", "latent"):
            assert spec.values_per_token == per_layer, spec
    by_kind = capacity.layer_kind_bytes_per_token(model, "bf16")
    assert sum(by_kind.values()) == capacity.kv_bytes_per_token(model)


def test_catalog_lookup():
    assert capacity.kv_bytes_per_token(plan_models.catalog_model("smollm2-135m")) == 23_040
    assert plan_models.catalog_model("meta-llama/Llama-3.1-8B-Instruct").name == "Llama-3.1-8B"
    with pytest.raises(UserError, match="known"):
        plan_models.catalog_model("no-such-model")


def test_remote_code_model_type_read_by_its_architecture():
    kimi = plan_models.catalog_model("Kimi-K2")
    assert kimi.attention_kind == "MLA" and "deepseek_v3" in kimi.notes[0]
    assert kimi.params_active < kimi.params_total / 20


def test_config_saved_by_transformers_with_float_infinity_is_accepted():
    from transformers import GraniteMoeHybridConfig

    cfg = GraniteMoeHybridConfig(
        num_hidden_layers=4, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=100, mamba_d_state=16, mamba_n_heads=4, mamba_d_head=32,
        layer_types=["mamba", "attention", "mamba", "attention"], num_local_experts=0).to_dict()
    cfg["time_step_limit"] = [0.0, {"__float__": "Infinity"}]  # as transformers writes inf
    model = plan_models.model_from_config(cfg, "tiny-granite-hybrid")
    assert model.num_layers == 4 and "full" in model.kinds
    assert plan_models.decode_saved_floats({"a": [{"__float__": "-Infinity"}]}) == {"a": [float("-inf")]}
