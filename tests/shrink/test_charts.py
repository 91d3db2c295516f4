"""Shrink charts: the quality sweep's settings each named and told apart, the kept map sized by its rows
(issue 37; how they read on a page is checked in Chromium by tests/browser/test_readable.py)."""
import pandas as pd

from kvviz.core.catalog import ASSETS_DIR
from kvviz.shrink import charts as sc
from kvviz.shrink import sweep


def shipped():
    """The sweep kvviz ships (SmolLM2-135M): SnapKV and StreamingLLM score the same at every
    ratio; hqq and quanto at 4 bits (and at 2) save 0.0001 apart in bytes and score the same."""
    return sc.sweep_frame(sweep.from_json((ASSETS_DIR / "shrink_sweep_smollm2.json").read_bytes()).rows)


def layers(spec):
    return spec["layer"]


def test_settings_that_score_the_same_are_drawn_and_named_as_one():
    names = sc.same_scores(shipped())
    assert names["SnapKV"] == names["StreamingLLM"] == "StreamingLLM = SnapKV"
    assert names["hqq 4-bit"] == names["quanto 4-bit"] == "quanto 4-bit = hqq 4-bit"
    assert names["hqq 2-bit"] == names["quanto 2-bit"] == "quanto 2-bit = hqq 2-bit"
    assert {names[c] for c in ("Knorm", "TOVA", "ExpectedAttention", "fp8 8-bit", "full cache")} == {
        "Knorm", "TOVA", "ExpectedAttention", "fp8 8-bit", "full cache"}


def test_curves_that_part_anywhere_keep_their_own_names():
    df = shipped()
    moved = df.assign(accuracy=df["accuracy"].where(~((df["curve"] == "SnapKV") & (df["ratio"] == 0.9)), 0.5))
    assert sc.same_scores(moved)["SnapKV"] == "SnapKV"
    far = df.assign(ratio=df["ratio"].where(df["curve"] != "hqq 4-bit", 0.86))  # 0.016 apart: two points
    assert sc.same_scores(far)["hqq 4-bit"] == "hqq 4-bit"


def test_every_setting_has_its_own_colour_and_the_full_cache_is_drawn_on_top():
    """Vega's default palette has ten colours: the eleventh setting got the first one's blue."""
    spec = sc.sweep_accuracy_chart(shipped()).to_dict()
    lines, points, full = layers(spec)
    scale = lines["encoding"]["color"]["scale"]
    assert scale["domain"] == ["StreamingLLM = SnapKV", "Knorm", "ExpectedAttention", "TOVA", "full cache",
                               "quanto 4-bit = hqq 4-bit", "quanto 2-bit = hqq 2-bit", "fp8 8-bit"]
    assert len(set(scale["range"])) == len(scale["range"]) == len(scale["domain"])
    assert scale["range"][scale["domain"].index("full cache")] == sc.FULL_COLOR
    assert full["transform"] == [{"filter": "datum.kind == 'full'"}] and full["mark"]["filled"] is False
    assert lines["encoding"]["detail"]["field"] == "curve"  # two merged curves stay two paths
    big = pd.concat([shipped(), pd.DataFrame([{**shipped().iloc[1].to_dict(), "curve": f"press {i}"}
                                              for i in range(12)])])
    rng = sc.sweep_accuracy_chart(big).to_dict()["layer"][0]["encoding"]["color"]["scale"]["range"]
    assert len(rng) == len(set(sc.same_scores(big).values()))


def test_the_sweep_legend_lists_a_setting_a_row_below_a_plot_of_fixed_height():
    """On one row above the plot the legend ran past the chart's edge at 1280 px: three settings
    unlabelled. One a row fits a phone; the chart grows to hold it, its plot keeps 240 px."""
    spec = sc.sweep_accuracy_chart(shipped()).to_dict()
    legend = layers(spec)[0]["encoding"]["color"]["legend"]
    assert legend == {"direction": "vertical", "orient": "bottom"}
    assert spec["autosize"] == {"type": "fit-x", "contains": "padding"} and spec["height"] == 240
    assert layers(spec)[0]["encoding"]["x"]["title"] == ["share of the prompt's cache removed",
                                                         "(press: evicted; quantized: bytes saved)"]
    bytes_legend = sc.sweep_bytes_chart(shipped()).to_dict()["encoding"]["color"]["legend"]
    assert bytes_legend == {"direction": "vertical", "orient": "top"}
    presses_only = shipped()[lambda d: d["kind"] == "press"]
    assert "full cache" not in layers(sc.sweep_accuracy_chart(presses_only).to_dict())[0]["encoding"]["color"][
        "scale"]["domain"]  # no legend entry for a setting not drawn


def test_the_kept_map_takes_its_height_from_its_rows():
    """A fixed 120 px: the legend and the axis took it all, each layer's row 0.25 px high."""
    kept = {0: [[0, 1, 5]], 1: [[2, 3, 5]]}
    df = sc.kept_map_frame(kept, 6, list("abcdef"))
    spec = sc.kept_map_chart(df).to_dict()
    assert spec["height"] == {"step": 22}
