"""The quality sweep's charts as the Shrink page draws them (kvviz.shrink.sweep_charts), on the shipped
sweep: every setting told apart, quantized caches on their own axis, a partial sweep titled as one,
each item's answers and the task table agreeing with the rows (issues 37 and 40; how they read on a
page is checked in Chromium by tests/browser/test_readable.py)."""
import dataclasses

from kvviz.core import assets
from kvviz.shrink import sweep, sweep_charts


def shipped() -> sweep.Sweep:
    """The sweep kvviz ships (SmolLM2-135M; partial while scripts/shrink_sweep.py still runs)."""
    return sweep.from_json((assets.FOLDER / "shrink_sweep_smollm2.json").read_bytes())


def layers(vega):
    return vega["layer"]


def data_of(vega, layer) -> list[dict]:
    """The rows a layer draws: its own data, else the chart's."""
    return vega["datasets"][(layer.get("data") or vega["data"])["name"]]


def test_every_press_has_a_row_of_its_own_and_every_ratio_a_colour_of_its_own():
    """The line chart drew settings that scored the same on top of each other (SnapKV hid under
    StreamingLLM) and gave an eleventh setting the first one's colour: a row per press (the
    question-aware entry its own) and a colour per ratio leave nothing to hide or to share."""
    result = shipped()
    df = sweep_charts.sweep_frame(result.rows)
    vega = sweep_charts.press_accuracy_chart(df).to_dict()
    band, line, bars, dots = layers(vega)
    presses = [r for r in result.rows if r.kind == "press"]
    rows = list(dict.fromkeys(r.press + (f" ({sweep_charts.QUESTION_AWARE})" if r.question_aware else "")
                              for r in presses))
    assert dots["encoding"]["y"]["field"] == "curve" and dots["encoding"]["y"]["sort"] == rows
    assert len(rows) >= 9 and "SnapKV (question in the window)" in rows  # 8+ presses and the aware entry
    color = dots["encoding"]["color"]
    assert color["scale"]["domain"] == ["25%", "50%", "75%", "87.5%", sweep_charts.FULL_LABEL]
    assert dots["encoding"]["yOffset"]["sort"] == color["scale"]["domain"][:4]
    assert len(set(color["scale"]["range"])) == 5 and color["legend"] == {"orient": "top", "titleOrient": "top", "columns": 2,
                                                                    "symbolOpacity": 1}
    assert band["encoding"]["color"] == color  # the grey band has the legend's fifth entry
    drawn = data_of(vega, dots)
    assert sorted((d["curve"], d["ratio"], d["accuracy"]) for d in drawn) == sorted(
        (sweep_charts.curve_of(r), r.ratio, r.accuracy) for r in presses)  # every press cell, once
    assert all(d["lo"] <= d["accuracy"] <= d["hi"] for d in drawn)
    assert (bars["encoding"]["x"]["field"], bars["encoding"]["x2"]["field"]) == ("lo", "hi")
    full = next(r for r in result.rows if r.kind == "full")
    assert [(d["lo"], d["hi"]) for d in data_of(vega, band)] == [full.interval]  # the full cache's band
    assert data_of(vega, line)[0]["accuracy"] == full.accuracy and vega["width"] == "container"


def test_quantized_caches_stand_on_their_own_axis_each_backend_beside_the_other():
    """hqq and quanto at 4 and at 2 bits sat on the same points of the eviction axis: their own
    axis (bits per value), a colour per backend, side by side (xOffset) at each width."""
    df = sweep_charts.sweep_frame(shipped().rows)
    vega = sweep_charts.quant_accuracy_chart(df).to_dict()
    rules, points = layers(vega)
    enc = points["encoding"]
    assert enc["x"]["field"] == "bits_label" and enc["xOffset"]["field"] == "backend"
    assert enc["x"]["sort"] == ["2-bit", "4-bit", "8-bit", "32-bit (full)"]
    assert enc["color"]["scale"]["domain"] == ["quanto", "hqq", "fp8", "full cache"]
    assert len(set(enc["color"]["scale"]["range"])) == 4
    assert (rules["encoding"]["y"]["field"], rules["encoding"]["y2"]["field"]) == ("lo", "hi")
    # fitted whole into 220 px, the legend and a partial sweep's title left the plot some 25 px (Chromium)
    assert vega["autosize"] == {"type": "fit-x", "contains": "padding"} and vega["height"] == 220
    assert sorted((d["backend"], d["bits"]) for d in data_of(vega, points)) == [
        ("fp8", 8), ("full cache", 32), ("hqq", 2), ("hqq", 4), ("quanto", 2), ("quanto", 4)]


def test_a_partial_sweep_is_titled_as_one_and_a_complete_one_is_not():
    result = shipped()
    partial = dataclasses.replace(result, complete=False, items_total=len(result.items) + 7)
    done = dataclasses.replace(result, complete=True)
    words = f"{len(result.items)} of {len(result.items) + 7} items so far"
    assert partial.so_far() == words and done.so_far() == ""
    df = sweep_charts.sweep_frame(result.rows)
    for chart in (sweep_charts.press_accuracy_chart, sweep_charts.quant_accuracy_chart):
        assert chart(df, f"Partial sweep: {words}").to_dict()["title"] == {"text": f"Partial sweep: {words}",
                                                                           "anchor": "start"}
        assert "title" not in chart(df).to_dict()


def test_each_items_answer_and_the_task_table_agree_with_the_rows():
    result = shipped()
    for r in result.rows:
        answers = sweep_charts.answers_frame(result, r.mode)
        assert len(answers) == len(result.items) and int(answers["right"].sum()) == r.right
        assert list(answers["answer"]) == list(r.answers)
    table = sweep_charts.task_table(result)
    assert list(table["mode"]) == [r.mode for r in result.rows]
    formats = [c for c in table.columns if c != "mode"]
    assert all(sum(int(table.loc[i, c].split("/")[0]) for c in formats) == r.right for i, r in enumerate(result.rows))
    twice = dataclasses.replace(result, rows=[result.rows[0], result.rows[0]])  # a file may name two rows alike:
    assert list(sweep_charts.task_table(twice)["mode"]) == ["full cache"] * 2  # pivoting on the name raised
