"""A pasted config is sized from the layer count its architecture builds (transformers' own
attribute names: MPT / DBRX `n_layers`, Blenderbot `decoder_layers`), so the hosted layer cap has
no side doors; its quant_method / bnb_4bit_quant_type reach the page as plain text only."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.app.ui import inert
from kvviz.planner import frames as pf

PAGE = str(Path(__file__).resolve().parents[2] / "app_pages" / "planner.py")
HUGE = 3_000
SIDE_DOORS = {  # model_type -> a config whose layer count hides under another name
    "mpt": {"model_type": "mpt", "n_layers": HUGE, "d_model": 64, "n_heads": 4, "vocab_size": 100},
    "dbrx": {"model_type": "dbrx", "n_layers": HUGE, "d_model": 64, "n_heads": 4, "vocab_size": 100},
    "blenderbot": {"model_type": "blenderbot", "decoder_layers": HUGE, "encoder_layers": 2, "d_model": 64,
                   "vocab_size": 100},
}
TINY_LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
              "max_position_embeddings": 4096}
HOSTILE = "**bold** [link](http://example.invalid) <img src=x> $x^2$ :red[red]"


@pytest.mark.parametrize("model_type", sorted(SIDE_DOORS))
def test_layer_counts_under_other_names_are_refused_before_building(model_type):
    with pytest.raises(pf.ConfigError) as err:
        pf.model_from_pasted_config(json.dumps(SIDE_DOORS[model_type]))
    assert f"would build {HUGE:,} layers" in str(err.value) and f"at most {pf.MAX_PASTED_LAYERS}" in str(err.value)


def test_the_same_architectures_within_the_cap_still_plan():
    small = {**SIDE_DOORS["mpt"], "n_layers": 3}
    assert pf.model_from_pasted_config(json.dumps(small)).num_layers == 3


@pytest.mark.slow
def test_hostile_quant_names_are_plain_text_on_the_page():
    configs = [{**TINY_LLAMA, "quantization_config": {"quant_method": HOSTILE}},
               {**TINY_LLAMA, "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True,
                                                      "bnb_4bit_quant_type": HOSTILE}}]
    for cfg in configs:
        at = AppTest.from_file(PAGE, default_timeout=60)
        at.query_params.update(plan_source="Paste config.json", plan_config=json.dumps(cfg))
        at.run()
        assert not at.exception
        shown = [c.value for c in at.caption] + [w.value for w in at.warning] + [i.value for i in at.info]
        quoting = [s for s in shown if "invalid" in s]
        assert quoting, "the page should still say which format it read"
        assert all(inert(HOSTILE) in s for s in quoting)  # escaped: no link, bold, image or LaTeX
