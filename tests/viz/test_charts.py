"""charts: marks, encoded fields, fixed domains, and that swapping data keeps the Vega-Lite."""
import json
from dataclasses import replace

import altair as alt
import pandas as pd
import pytest

from kvviz.viz import charts
from kvviz.live import charts as live_charts
from kvviz.core.events import BlockStat, LayerStat, StepEvent
from metas import meta_of
from kvviz.live.frames import (
    block_grid_frame, layer_times_frame, reservation_frame, steps_frame,
)

BLOCKS = BlockStat(block_size=16, num_blocks=12, num_used_blocks=4, num_free_blocks=8,
                   num_slots_in_last_block=5, paged_bytes=4096, contiguous_bytes=12288,
                   contiguous_is_real=False)


def event(mode, step, step_ms):
    layers = tuple(LayerStat(layer=i, k_bytes=64 * (step + 4), v_bytes=64 * (step + 4), tokens=step + 4, forward_ms=0.2 * (i + 1))
                   for i in range(2))
    return StepEvent(
        mode=mode, phase="prefill" if step == 0 else "decode", step=step, token_ids=(1, 2),
        texts=("a", "b"), finished=(False, False), step_ms=step_ms, seq_len=step + 4,
        positions=8 if step == 0 or mode == "cached" else 2 * (step + 4),
        kv_bytes=256 * (step + 4) if mode == "cached" else 0,
        formula_bytes=256 * (step + 4) if mode == "cached" else 0, layers=layers,
        blocks=BLOCKS if mode == "cached" else None)


def events(n=4):
    out = []
    for step in range(n):
        out += [event("cached", step, 50.0 if step == 0 else 5.0),
                event("recompute", step, 60.0 + 10 * step)]
    return out


def steps(n=4):
    return steps_frame(events(n))


def layers_of(vega):
    """The single-view Vega-Lite dicts of a chart: its layers, or itself."""
    return vega.get("layer", [vega])


def marks(vega):
    return [m["type"] if isinstance(m, dict) else m for m in (v["mark"] for v in layers_of(vega))]


def field(view, channel):
    return view["encoding"][channel]["field"]


def rows(vega, data=None):
    """The rows of the chart's top-level dataset."""
    name = (data or vega["data"])["name"]
    return vega["datasets"][name]


def builders():
    """Each chart builder, with its input frame and one with more rows."""
    evs = events(6)
    return {
        "layer_groups": (lambda df: charts.layer_groups_chart(df, 4096, ["all 2 layers · full"]),
                         live_charts.layer_groups_frame(UNIFORM, evs[0]),
                         live_charts.layer_groups_frame(UNIFORM, evs[-2])),
        "total_cache": (lambda df: charts.total_cache_chart(df, 50_000, 12288, 64),
                        steps_frame(evs[:2]), steps_frame(evs)),
        "block_grid": (charts.block_grid_chart, block_grid_frame(BLOCKS, 2),
                       block_grid_frame(BLOCKS, 1)),
        "reservation": (lambda df: charts.reservation_chart(df, max_bytes=12288),
                        reservation_frame(BLOCKS, 1000), reservation_frame(BLOCKS, 3000)),
        "step_time": (lambda df: charts.step_time_chart(df, 32, 200.0),
                      steps_frame(evs[:2]), steps_frame(evs)),
        "layer_time": (lambda df: charts.layer_time_chart(df, "cached", max_step=32),
                       layer_times_frame(evs[:2]), layer_times_frame(evs)),
        "race": (lambda df: charts.race_chart(df, 32, 1000.0), steps_frame(evs[:2]),
                 steps_frame(evs)),
        "positions": (lambda df: charts.positions_chart(df, 32, 500), steps_frame(evs[:2]),
                      steps_frame(evs)),
    }


UNIFORM = meta_of({"num_layers": 2, "windows": [None, None]})
# 16 K and 16 V values per token in bf16, batch 2: 64 B a token per tensor, as the events below measure
MIXED = meta_of({"num_layers": 3, "elem_bytes": 2, "batch": 2,
                 "layers": [{"kind": "full", "kv_heads": 2, "values_per_token": 32}]
                 + [{"kind": "sliding", "kv_heads": 2, "values_per_token": 32, "token_cap": 4}] * 2})


def test_a_uniform_model_is_one_group_not_a_bar_per_layer():
    df = live_charts.layer_groups_frame(UNIFORM, events()[2])
    assert list(df.group) == ["all 2 layers · full"] * 2 and list(df.kind) == ["K", "V"]
    assert list(df.layers) == [2, 2] and list(df.group_bytes) == [2 * 64 * 5] * 2
    vega = charts.layer_groups_chart(df, 4096, list(live_charts.layer_groups(UNIFORM))).to_dict()
    assert marks(vega) == ["bar", "tick", "text"]
    bars = vega["layer"][0]["encoding"]
    assert (bars["x"]["field"], bars["xOffset"]["field"], bars["y"]["field"]) == ("group", "kind", "kv_bytes")
    assert bars["y"]["scale"]["domain"] == [0, 4096] and bars["x"]["scale"]["domain"] == ["all 2 layers · full"]
    assert bars["color"]["scale"] == {"domain": ["K", "V"], "range": ["#4C78A8", "#F58518"]}
    assert bars["y"]["axis"]["values"][-1] == 4096  # ticks on round KiB
    assert "KiB" in bars["y"]["axis"]["labelExpr"]


def test_mixed_kinds_get_a_group_each_with_the_window_marked():
    layers = (LayerStat(layer=0, k_bytes=640, v_bytes=640, tokens=10, forward_ms=0.1), LayerStat(layer=1, k_bytes=192,
                        v_bytes=192, tokens=3, forward_ms=0.1), LayerStat(layer=2, k_bytes=192, v_bytes=192, tokens=3,
                        forward_ms=0.1))
    ev = replace(events()[2], layers=layers)
    df = live_charts.layer_groups_frame(MIXED, ev)
    assert list(live_charts.layer_groups(MIXED)) == ["1 layer · full", "2 layers · sliding 4"]
    sliding = df[df.group == "2 layers · sliding 4"]
    assert list(sliding.cap_bytes) == [192, 192]  # 64 B per token x the 3 tokens a window of 4 holds
    assert list(sliding.kv_bytes) == [192, 192]  # what the layers measure once full: the same bytes
    assert list(sliding.cap_label) == ["window 4"] * 2 and list(sliding.group_bytes) == [384, 384]
    assert df[df.group == "1 layer · full"].cap_bytes.isna().all()
    with_state = replace(ev, layers=(*layers[:2], LayerStat(layer=2, k_bytes=0, v_bytes=0, tokens=0, forward_ms=0.1, state_bytes=900)))
    assert "state" in set(live_charts.layer_groups_frame(MIXED, with_state).kind)


def test_total_cache_chart_measured_solid_formula_dashed_on_top_and_labelled_rules():
    vega = charts.total_cache_chart(steps(), 50_000, 12288, max_seq_len=64).to_dict()
    assert marks(vega) == ["line", "line", "rule", "text"]
    measured, formula, rule, text = vega["layer"]
    for line, source in ((measured, "kv_bytes"), (formula, "formula_bytes")):
        assert (field(line, "x"), field(line, "y"), field(line, "color")) == ("seq_len", "bytes", "series")
        assert {"calculate": f"datum.{source}", "as": "bytes"} in line["transform"]
        assert {"filter": "(datum.mode === 'cached')"} in line["transform"]
        assert line["encoding"]["x"]["scale"]["domain"] == [0, 64]
        assert line["encoding"]["y"]["scale"]["domain"] == [0, int(1.08 * 50_000)]
    assert measured["mark"]["strokeDash"] == [1, 0] and formula["mark"]["strokeDash"] != [1, 0]
    assert measured["mark"]["strokeWidth"] > formula["mark"]["strokeWidth"]  # formula drawn over it
    refs = vega["datasets"][rule["data"]["name"]]
    assert {r["label"]: r["bytes"] for r in refs} == {
        "model weights": 50_000, "contiguous reservation": 12288}
    assert rule["data"] == text["data"] and field(text, "text") == "label"
    assert len(rows(vega)) == 8  # the main data is all of steps_df; the filter is in the Vega-Lite


def test_total_cache_chart_leaves_out_zero_rules():
    vega = charts.total_cache_chart(steps(), 50_000, 0).to_dict()
    _, _, rule, _ = vega["layer"]
    assert [r["label"] for r in vega["datasets"][rule["data"]["name"]]] == ["model weights"]
    assert marks(charts.total_cache_chart(steps(), 0, 0).to_dict()) == ["line", "line"]


def test_block_grid_chart_rect_grid_coloured_by_state():
    vega = charts.block_grid_chart(block_grid_frame(BLOCKS, 2), columns=8).to_dict()
    assert marks(vega) == ["rect"]
    assert (field(vega, "x"), field(vega, "y"), field(vega, "color")) == ("col", "row", "state")
    calc = {t["as"]: t["calculate"] for t in vega["transform"]}
    assert calc == {"col": "datum.block % 8", "row": "floor(datum.block / 8)"}
    assert vega["encoding"]["color"]["scale"]["domain"] == ["full", "partial", "free"]
    tips = {t["field"] for t in vega["encoding"]["tooltip"]}
    assert {"seq", "slot_fill"} <= tips
    assert [r["state"] for r in rows(vega)].count("free") == BLOCKS.num_free_blocks


def test_reservation_chart_stacked_horizontal_bars_each_row_labelled_above_its_bar():
    vega = charts.reservation_chart(reservation_frame(BLOCKS, 3000)).to_dict()
    assert marks(vega) == ["bar", "text"]
    bars, labels = vega["layer"]
    assert (field(bars, "x"), field(bars, "y"), field(bars, "color")) == ("bytes", "layout", "part")
    assert bars["encoding"]["x"]["stack"] == "zero"
    assert bars["encoding"]["y"]["sort"] == ["paged (modelled)", "contiguous max-length"]
    assert bars["encoding"]["x"]["scale"]["domain"] == [0, 12288]  # the labels no longer need room on the right
    assert bars["encoding"]["y"]["axis"] is None  # each row's label names its layout
    assert field(labels, "text") == "row" and labels["encoding"]["x"] == {"value": 0}
    assert labels["encoding"]["y"]["bandPosition"] == 0 and labels["mark"]["baseline"] == "top"
    assert labels["transform"][-1] == {"calculate": "datum.layout + ': ' + datum.label", "as": "row"}
    assert bars["mark"]["size"] == charts.BAR_PX and bars["mark"]["yOffset"] > 0  # below the label
    assert bars["encoding"]["color"]["legend"]["orient"] == "bottom"


def test_the_blocks_chart_takes_its_height_from_its_rows_not_a_fixed_box():
    """Issue 37: at a fixed 130 px (190 on stage) the legend and the axis took all the height and
    both bars collapsed into one hairline, both labels printed over each other. Each row now has
    ROW_STEP_PX and the chart grows to hold its axis and legend, on a screen and on stage."""
    vega = charts.reservation_chart(reservation_frame(BLOCKS, 3000)).to_dict()
    assert vega["height"] == {"step": charts.ROW_STEP_PX}
    assert charts.ROW_STEP_PX >= charts.BAR_PX + 1.5 * charts.FONT_PX[("text", "fontSize")] + 8
    assert "reservation" not in live_charts.heights(presenting=False)
    assert "reservation" not in live_charts.heights(presenting=True)


def test_blocks_caption_and_chart_say_the_same_unused_share():
    """Batch 2, 14 tokens in 16-slot blocks: 2 of 16 slots unused = 12.5 %. Python's format rounds
    half to even ("12%") where the chart's Vega format rounds half up ("13%"): both now take the
    label from captions.unused_label, and the chart draws that column."""
    from kvviz.live import captions
    meta = meta_of({"bytes_per_token": 100, "batch": 2, "max_len": 40})
    for tokens in (14, 16, 17, 30):
        used = -(-tokens // 16) * 2
        blocks = BlockStat(block_size=16, num_blocks=6, num_used_blocks=used, num_free_blocks=6 - used,
                           num_slots_in_last_block=tokens - 16 * (used // 2 - 1), paged_bytes=used * 16 * 100,
                           contiguous_bytes=2 * 40 * 100, contiguous_is_real=False)
        last = StepEvent(mode="cached", phase="decode", step=3, token_ids=(1, 2), texts=("a", "b"),
                         finished=(False, False), step_ms=1.0, seq_len=tokens + 1, positions=2, kv_bytes=0,
                         formula_bytes=0, layers=(), blocks=blocks)
        df = live_charts.reservation_data(meta, last)
        for (layout, label), wasted in zip(df.groupby("layout", sort=False)["unused_label"].first().items(),
                                           captions.wasted_fractions(meta, last)):
            assert df[df.layout == layout]["wasted_fraction"].iloc[0] == pytest.approx(wasted)
            assert label == captions.unused_label(wasted)
            assert f"leaves {label}" in captions.blocks_caption(meta, last), (tokens, layout)
        if tokens == 14:
            assert df.unused_label.iloc[0] == "13% unused" and "leaves 13% unused" in captions.blocks_caption(meta, last)
        vega = charts.reservation_chart(df).to_dict()
        assert vega["layer"][1]["transform"][-2] == {"calculate": "datum.unused_label", "as": "label"}


def test_step_time_chart_prefill_points_and_decode_lines_by_mode():
    vega = charts.step_time_chart(steps(), max_step=32, max_ms=200).to_dict()
    assert marks(vega) == ["line", "point"]
    decode, prefill = vega["layer"]
    assert decode["transform"] == [{"filter": "(datum.phase === 'decode')"}]
    assert prefill["transform"] == [{"filter": "(datum.phase === 'prefill')"}]
    assert prefill["encoding"]["shape"]["scale"]["range"] == ["diamond"]
    for view in (decode, prefill):
        assert view["encoding"]["color"]["scale"]["domain"] == ["cached", "recompute"]
        assert (field(view, "x"), field(view, "y"), field(view, "color")) == (
            "step", "step_ms", "mode")
        assert view["encoding"]["x"]["scale"]["domain"] == [0, 32]
        assert view["encoding"]["y"]["scale"]["domain"] == [0, 200]
    log = charts.step_time_chart(steps(), log_scale=True).to_dict()
    assert log["layer"][0]["encoding"]["y"]["scale"]["type"] == "log"


def test_layer_time_chart_heatmap_filters_mode_and_prefill():
    vega = charts.layer_time_chart(layer_times_frame(events()), "cached", max_step=10).to_dict()
    assert marks(vega) == ["rect"]
    assert (field(vega, "x"), field(vega, "x2"), field(vega, "y"), field(vega, "color")) == (
        "step", "step_end", "layer", "forward_ms")
    filters = [t["filter"] for t in vega["transform"] if "filter" in t]
    assert filters == ["(datum.mode === 'cached')", "(datum.phase === 'decode')"]
    assert vega["encoding"]["x"]["scale"]["domain"] == [0, 11]
    everything = charts.layer_time_chart(layer_times_frame(events()), None, True).to_dict()
    assert not [t for t in everything["transform"] if "filter" in t]


@pytest.mark.parametrize("build,y,rest", [(charts.race_chart, "elapsed_ms", "modelled"),
                                          (charts.positions_chart, "positions_total", "counted, not run")])
def test_race_and_positions_one_line_per_mode_and_the_remainder_dashed(build, y, rest):
    vega = build(steps(), 32, 1000).to_dict()
    (lines, points), remainder, axis_end = [layer.get("layer", layer) for layer in vega["layer"]]
    assert [lines["mark"]["type"], points["mark"]["type"], remainder["mark"]["type"]] == ["line", "point", "line"]
    for measured in (lines, points):  # the measured steps, without the remainder's rows
        assert (field(measured, "x"), field(measured, "y"), field(measured, "color")) == ("new_tokens", y, "mode")
        assert measured["encoding"]["x"]["scale"]["domain"] == [0, 32]
        assert measured["encoding"]["y"]["scale"]["domain"] == [0, 1000]
        assert measured["encoding"]["color"]["scale"]["range"] == list(charts.MODE_COLORS.values())
    # one dash legend for both: "measured" solid, `rest` dashed, listing only what the data holds (a
    # fixed domain showed "modelled" on a run whose no-cache side had finished)
    for layer, shown in ((lines, "measured"), (remainder, rest)):
        dash = layer["encoding"]["strokeDash"]
        assert dash["sort"] == ["measured", rest] and dash["scale"] == {"range": [[1, 0], [6, 4]]}
        assert "domain" not in dash["scale"] and {"calculate": f"'{shown}'", "as": "shown"} in layer["transform"]
    assert remainder["transform"][0] == {"filter": "datum.series === 'modelled'"}
    assert axis_end["mark"]["opacity"] == 0 and field(axis_end, "x") == "new_tokens"
    free = build(steps()).to_dict()["layer"][0]["layer"][0]["encoding"]["x"]["scale"]  # the page's: the data says
    assert free == {"domainMin": 0, "nice": False}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(builders()))
def test_with_data_equals_rebuilding(name):
    build, small, large = builders()[name]
    swapped = charts.with_data(build(small), large).to_dict()
    assert swapped == build(large).to_dict()
    assert build(small).to_dict() != swapped  # the data did change


@pytest.mark.parametrize("name", list(builders()))
def test_vega_with_data_swaps_only_the_table(name):
    build, small, large = builders()[name]
    vega = charts.to_vega_lite(build(small))
    assert vega["data"] == {"name": charts.TABLE}
    assert charts.TABLE not in vega.get("datasets", {})
    assert "continuousWidth" not in json.dumps(vega.get("config", {}))
    before = json.dumps(vega)
    live = charts.vega_lite_with_data(vega, large)
    sent = live["datasets"][charts.TABLE]
    # only the columns the chart reads travel: every field it encodes, none it never names
    assert fields_named(vega) <= set(sent.column_names) <= set(large.columns)
    assert all(c in json.dumps({k: v for k, v in vega.items() if k != "datasets"}) for c in sent.column_names)
    assert sent.equals(streamlits_own(large[sent.column_names]))
    assert json.dumps(vega) == before  # the built Vega-Lite is left untouched
    assert {k: v for k, v in live.items() if k != "datasets"} == {
        k: v for k, v in vega.items() if k != "datasets"}


def named(vega, key: str) -> set[str]:
    """Every string (or list of strings) under `key` in the chart's dict, at any depth."""
    if isinstance(vega, dict):
        if vega.get("data", {"name": charts.TABLE}) != {"name": charts.TABLE}:
            return set()  # a layer over its own data (a labelled rule's values): not the main table
        value = vega.get(key)
        own = {value} if isinstance(value, str) else {v for v in value if isinstance(v, str)} if isinstance(value, list) else set()
        return own.union(*(named(v, key) for k, v in vega.items() if k != "datasets"))
    if isinstance(vega, list):
        return set().union(*(named(v, key) for v in vega))
    return set()


def fields_named(vega) -> set[str]:
    """The data columns the chart's encodings, transforms and sorts read: every "field" but those
    its own transforms make ("as")."""
    return named(vega, "field") - named(vega, "as")


def test_the_live_page_s_frames_travel_with_only_the_columns_their_charts_read():
    """The steps frame has 16 columns; the step-time chart reads a handful (Streamlit converts
    every column sent to Arrow on the script thread, while the model waits for the interpreter)."""
    build, small, large = builders()["step_time"]
    sent = charts.vega_lite_with_data(charts.to_vega_lite(build(small)), large)["datasets"][charts.TABLE]
    assert len(large.columns) == 16 and len(sent.column_names) < 8, sent.column_names
    assert {"cuda_allocated_bytes", "paged_bytes"}.isdisjoint(sent.column_names)


def streamlits_own(df):
    """The Arrow table Streamlit makes of a frame (dataframe_util), without its pandas metadata and
    index: what a chart handed the frame itself would send."""
    from streamlit import dataframe_util
    table = dataframe_util.convert_pandas_df_to_arrow_table(df.reset_index(drop=True))
    return table.replace_schema_metadata(None)


def test_an_arrow_table_goes_out_as_the_frame_would_and_a_mixed_column_is_left_to_streamlit():
    df = pd.DataFrame({"mode": ["cached", "recompute"], "step": [0, 1], "ms": [1.5, 2.5],
                       "blocks": pd.array([3, None], dtype="Int64"), "at": [{"a": 1}, "x"]}, index=[4, 9])
    table = charts.arrow_table(df, ("mode", "step", "ms", "blocks"))
    assert table.equals(streamlits_own(df[["mode", "step", "ms", "blocks"]]))
    assert table.column("blocks").null_count == 1 and table.num_rows == 2
    from streamlit import dataframe_util
    import pyarrow as pa
    sent = pa.ipc.open_stream(dataframe_util.convert_anything_to_arrow_bytes(table)).read_all()
    assert sent.equals(table)  # Streamlit ships the table as it is
    mixed = charts.arrow_table(df, ("mode", "at"))  # Arrow cannot type this column: Streamlit repairs it
    assert isinstance(mixed, pd.DataFrame) and list(mixed.columns) == ["mode", "at"]


@pytest.mark.parametrize("name", list(builders()))
def test_the_unvalidated_dict_is_the_one_altair_validates(name):
    """to_vega_lite skips Altair's schema validation (the page's build): the same dict passes it."""
    build, small, _ = builders()[name]
    chart = build(small)
    validated = chart.properties(data=charts.alt.Data(name=charts.TABLE)).to_dict(validate=True)
    unvalidated = charts.to_vega_lite(chart)
    assert {k: v for k, v in unvalidated.items() if k != "config"} == {
        k: v for k, v in validated.items() if k != "config"}


def test_charts_accept_empty_frames():
    for name, (build, small, _) in builders().items():
        empty = small.iloc[0:0]
        assert rows(build(empty).to_dict()) == [], name


def test_bytes_expr_picks_units():
    expr = charts.bytes_expr("datum.v")
    assert expr.index("GiB") < expr.index("MiB") < expr.index("KiB") < expr.index("' B'")
    assert "1073741824" in expr and "1048576" in expr and "1024" in expr


def test_bytes_axis_ticks_on_round_units():
    axis = charts._bytes_axis(360 * 2**20).to_dict()
    assert axis["values"] == [i * 100 * 2**20 for i in range(4)]
    assert "MiB" in axis["labelExpr"]
    assert charts._bytes_axis(None).to_dict()["labelExpr"] == charts.bytes_expr("datum.value")


def test_charts_are_altair_objects():
    for name, (build, small, _) in builders().items():
        assert isinstance(build(small), (alt.Chart, alt.LayerChart)), name
    assert isinstance(charts.with_data(charts.block_grid_chart(block_grid_frame(BLOCKS, 2)), pd.DataFrame()),
                      alt.Chart)


def test_the_per_layer_axis_fits_the_largest_tensor_of_any_kind():
    base = {"num_layers": 3, "batch": 2, "max_len": 100, "num_kv_heads": 2, "head_dim": 8, "elem_bytes": 2}
    assert live_charts.largest_tensor_bytes(meta_of(base)) == 2 * 8 * 100 * 2 * 2  # older traces
    meta = {**base, "windows": [10, 10, None], "layer_kinds": ["sliding", "sliding", "state"],
            "layer_labels": ["sliding 10"] * 2 + ["state"], "layer_bytes_per_token": [64, 64, 0],
            "layer_state_bytes": [0, 0, 0]}
    assert live_charts.largest_tensor_bytes(meta_of(meta)) == 32 * 9 * 2  # capped at the window − 1 tokens held
    meta["layer_state_bytes"] = [0, 0, 5000]
    assert live_charts.largest_tensor_bytes(meta_of(meta)) == 10_000  # a state larger than any K or V


def test_the_whole_cache_legend_sits_below_the_plot():
    """Beside the plot, on a phone on stage, the "contiguous reservation" label ran into its title."""
    vega = charts.total_cache_chart(steps(), 50_000, 12288, max_seq_len=64).to_dict()
    assert vega["layer"][0]["encoding"]["color"]["legend"] == {"direction": "horizontal", "orient": "bottom"}


def test_the_positions_title_takes_two_lines():
    """On one line, "positions processed (total)" ran past the top of a 220 px chart."""
    vega = charts.positions_chart(steps(), 32, 500).to_dict()
    assert vega["layer"][0]["layer"][0]["encoding"]["y"]["title"] == ["positions processed", "(total)"]


def test_stage_text_is_enlarged_on_a_screen_and_kept_on_a_phone():
    """Presenter mode's 1.5x chart text (for a projector) ran past a phone's chart edges: each size
    is an expression of the window's width, the usual size under PHONE_PX."""
    scaled = charts.with_font_scale({"mark": "bar"}, 1.5)["config"]
    assert scaled["axis"]["labelFontSize"] == {"expr": f"windowSize()[0] < {charts.PHONE_PX} ? 12 : 18"}
    assert scaled["legend"]["labelLimit"] == {"expr": f"windowSize()[0] < {charts.PHONE_PX} ? 160 : 240"}
    assert scaled["text"]["fontSize"] == {"expr": f"windowSize()[0] < {charts.PHONE_PX} ? 11 : 16"}
