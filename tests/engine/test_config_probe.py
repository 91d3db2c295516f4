"""A pasted config's layout measured from the architecture's own code on the meta device
(kvviz.engine.config_probe): Falcon's multi-query heads, which its field names hide, found; a layout
the fields already give kept; state layers keeping the config's sizes; a config whose architecture
cannot be built keeping its field-name layout, with why; and the planner's pasted-config path giving
the bytes a run measures. (Every model type's planner layout against its run's: the sweep in
tests/engine/test_model_types.py.)"""
from __future__ import annotations

import torch
from transformers import CLIPConfig

from kvviz.core import layout
from kvviz.engine import config_probe
from kvviz.engine import loop as engine
from kvviz.engine.models import LoadedModel
from kvviz.planner import frames as planner_frames
from tests.engine.test_model_types import build, run_config, sized_config
from tiny import tiny_config, tiny_tokenizer


def sizes(specs) -> list[tuple]:
    return [(s.kind, s.kv_heads, s.values_per_token, s.token_cap, s.state_values, s.state_float32_values)
            for s in specs]


def test_falcon_s_single_key_value_head_is_measured_where_the_fields_say_four():
    config = sized_config("falcon")  # hidden 64, 4 heads of 16, multi_query
    fields = layout.layer_specs(config)
    measured, note = config_probe.measured_layout(config, fields)
    assert note == "" and len(measured) == len(fields)
    assert {(s.kv_heads, s.values_per_token) for s in fields} == {(4, 2 * 4 * 16)}
    assert {(s.kv_heads, s.values_per_token) for s in measured} == {(1, 2 * 1 * 16)}


def test_a_layout_the_fields_give_is_kept_and_state_layers_keep_the_config_s_sizes():
    for config in (tiny_config("sliding"), sized_config("mamba")):
        fields = layout.layer_specs(config)
        measured, note = config_probe.measured_layout(config, fields)
        assert note == "" and sizes(measured) == sizes(fields), type(config).__name__
    assert {s.kind for s in layout.layer_specs(sized_config("mamba"))} == {layout.STATE}


def test_a_config_whose_architecture_cannot_be_built_keeps_its_field_layout_and_says_why():
    specs = (layout.CacheSpec(kind=layout.FULL, kv_heads=2, values_per_token=64),)
    measured, note = config_probe.measured_layout(CLIPConfig(), specs)  # no causal LM of that class
    assert measured == specs and note == "sizes from config fields (the architecture could not be built: ValueError)"


def test_a_pasted_falcon_config_plans_the_bytes_a_run_measures():
    """Falcon's `multi_query` is invisible to field names (they gave 4x the cache); the planner's
    pasted-config path now gives the run's bytes per token."""
    config = sized_config("falcon")
    model = planner_frames.model_from_pasted_config(config.to_json_string())
    lm = LoadedModel(model=build(config), tokenizer=tiny_tokenizer(), name="falcon", label="falcon",
                     device=torch.device("cpu"), dtype=torch.float32, load_s=0.0)
    plan = engine.plan_run(lm, run_config())
    assert sum(s.values_per_token for s in model.specs) == sum(s.values_per_token for s in plan.specs) > 0
    assert any("measured from the architecture" in note for note in model.notes)
