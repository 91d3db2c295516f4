"""Catalog-wide test cases split between the two targets: `make check` runs the first catalog entry
of each model_type (every architecture the catalog has, one model each), `make test` runs them all
(the rest are marked slow). A catalog model costs ~0.5 s to build (its config, its layout and its
parameter count on the meta device), so all 46 in every catalog-wide test would take the fast
loop over its budget."""
from __future__ import annotations

import pytest

from kvviz.planner import capacity


def first_of_each_type(value=lambda entry: entry["name"]) -> list:
    """pytest params, one per catalog entry (`value(entry)`, its name as id); all but the first of
    each model_type are marked slow."""
    seen, params = set(), []
    for entry in capacity.load_catalog():
        model_type = capacity.catalog_config(entry).get("model_type")
        params.append(pytest.param(value(entry), id=entry["name"],
                                   marks=() if model_type not in seen else pytest.mark.slow))
        seen.add(model_type)
    return params
