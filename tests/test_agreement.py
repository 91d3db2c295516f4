"""One figure, one answer: where two paths of kvviz compute the same number, they agree.

For every catalog model (and the tiny models the live page runs): the cache bytes the planner
shows for a context (kvviz.planner.capacity) and the live page's formula at the same token count
(kvviz.cache.layout.formula_bytes, also the Sweep's and the trace's) are the same number, in every
dtype the live page can run; and the Sweep's out-of-memory boundary agrees with its own
'predicted not to fit' flag (tests/test_sweep.py covers the sliding mix).
"""
import pytest

from kvviz.planner import capacity, plan_models
from kvviz.cache import layout

CATALOG = [e["name"] for e in capacity.load_catalog()]
CONTEXTS = (1, 17, 500, 4096, 8000, 131_072)
LIVE_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2}  # the dtypes a live run records, bytes per value


@pytest.mark.parametrize("name", CATALOG)
def test_planner_and_live_formula_agree_for_every_catalog_model(name):
    model = plan_models.catalog_model(name)
    for dtype, elem_bytes in LIVE_DTYPES.items():
        for tokens in CONTEXTS:
            planner = capacity.kv_bytes_for_context(model, tokens, dtype)
            live = layout.formula_bytes(model.specs, tokens, 1, elem_bytes)
            assert planner == live, (name, dtype, tokens, planner, live)
        assert capacity.kv_bytes_per_token(model, dtype) == layout.bytes_per_token(model.specs, elem_bytes)


@pytest.mark.parametrize("name", CATALOG)
def test_planner_specs_are_the_layout_of_the_catalog_config(name):
    """The planner's model is the layout of the very config the live page would load."""
    entry = capacity.find_catalog_entry(name)
    config, _ = plan_models.resolve_model_type(capacity.catalog_config(entry))  # Kimi K2: remote code
    specs = layout.layer_specs(layout.config_from_dict(config))
    assert plan_models.catalog_model(name).specs == specs
