"""The cache map's Altair charts (kvviz.live.cache_map_charts): stable across data, token text only
as data, a click/tap picks a column, layer labels cleaned; pure, no model."""
from __future__ import annotations

import json

import altair as alt
import pytest

from kvviz.live import cache_map as cm
from kvviz.live import cache_map_charts as cc
from kvviz.viz import charts
from metas import meta_of
from tests.live.test_cache_map import META, run


@pytest.mark.slow
def test_map_vega_is_stable_across_data_and_keeps_text_out_of_the_vega():
    events = run(META, 3, [None, 3])
    kinds = META.specs
    vega = charts.to_vega_lite(cc.cache_map_chart(cm.map_frame(META, []), kinds, 12, 4))
    assert "<g" not in json.dumps(vega)  # token text travels only as data
    fed = charts.vega_lite_with_data(vega, cm.map_frame(META, events))
    assert {k: v for k, v in fed.items() if k != "datasets"} == {k: v for k, v in vega.items() if k != "datasets"}
    chart = alt.Chart.from_dict({**vega, "datasets": {**vega["datasets"], charts.TABLE: []}})
    assert chart is not None
    layers = vega["layer"]
    cells = layers[0]["encoding"]
    assert cells["x"]["scale"]["domain"] == [0, 12] and cells["yOffset"]["field"] == "tensor_row"
    assert cells["color"]["scale"]["domain"] == ["K", "V", "dropped", "padding"]
    assert "sliding 3" in cells["y"]["axis"]["labelExpr"]  # a mixed model names each layer's kind
    columns = next(layer for layer in layers if "tooltip" in layer.get("encoding", {}))  # before the picked labels
    assert [t["field"] for t in columns["encoding"]["tooltip"]] == ["where", "part", "text"]


def test_a_click_or_tap_on_a_column_writes_its_token_from_the_data():
    """Touch screens have no hover: a point selection on click picks a column, shades it, and text
    marks filtered by it write "position N: <token>" computed from the row, never from the Vega-Lite."""
    kinds = META.specs
    vega = charts.to_vega_lite(cc.cache_map_chart(cm.map_frame(META, []), kinds, 12, 4))
    layers = vega["layer"]
    columns = next(layer for layer in layers if "tooltip" in layer.get("encoding", {}))
    param = vega["params"][0]  # Altair lifts a layer's selection to the top, naming its view
    assert param["views"] == [columns["name"]]
    assert param["name"] == cc.PICK and param["select"]["on"] == "click" and param["select"]["fields"] == ["pos_start"]
    assert columns["encoding"]["opacity"]["condition"]["param"] == cc.PICK
    labels = [layer for layer in layers if layer["mark"]["type"] == "text" and layer["encoding"]["text"]["field"] == "picked"]
    assert len(labels) == 4  # left and right of the middle, each a white halo under the text
    assert all({"param": cc.PICK, "empty": False} in [t.get("filter") for t in layer["transform"]] for layer in labels)
    assert all("datum.text" in next(t["calculate"] for t in layer["transform"] if "calculate" in t) for layer in labels)
    static = charts.to_vega_lite(cc.cache_map_chart(cm.map_frame(META, []), kinds, 12, 4, hover=False))
    assert "params" not in json.dumps(static) and cc.PICK not in json.dumps(static)


def test_uniform_models_get_plain_layer_numbers_and_unsafe_labels_are_cleaned():
    uniform = meta_of({"num_layers": 3, "windows": [None] * 3}).specs
    assert "labelExpr" not in cc.layer_axis(uniform).to_dict()
    # labels are the specs' own words from validated numbers; an older file's label text is never drawn
    odd = meta_of({"num_layers": 2, "layer_kinds": ["shared", "full"],
                   "layer_labels": ["shared ← 8'];alert(1);//", "full"]}).specs
    assert "'" not in cc.layer_axis(odd).to_dict()["labelExpr"].replace("' · '", "")
    assert [k.label() for k in odd] == ["shared ← 8", "full"]


def test_attention_vega_renders_share_on_a_fixed_scale():
    vega = charts.to_vega_lite(cc.attention_chart(cm.attention_frame(META, []), META.specs, 12, 4))
    color = vega["layer"][0]["encoding"]["color"]
    assert color["field"] == "share" and color["scale"]["domain"] == [0, 1]
