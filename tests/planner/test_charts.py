"""Planner charts keep their plot, labels and legend in view on a phone and on stage (issue 37;
drawn and read in Chromium by tests/browser/test_readable.py)."""
from kvviz.planner import charts as planner_charts
from kvviz.planner import frames as pf
from tests.planner.test_frames import llama8b_plan


def test_the_curve_keeps_its_plot_height_and_its_labels_inside():
    """Given no height, in presenter mode's larger text the curve's title, legend and axes left its
    plot 0 px high; "128K" and the one-line y title ran past the chart's edges."""
    vega = planner_charts.fit_curve_chart(pf.fit_curve_frame(llama8b_plan()), 2000, 256, 131_072).to_dict()
    assert vega["height"] == planner_charts.CURVE_PLOT_PX
    assert vega["autosize"] == {"type": "fit-x", "contains": "padding"} and vega["padding"] == {"right": 8}
    line = vega["layer"][0]["encoding"]
    assert line["x"]["axis"]["labelFlush"] is True
    assert line["y"]["title"] == ["requests that fit at once", "(per replica, log scale)"]
    assert line["color"]["legend"]["direction"] == "vertical"  # both entries fit a phone, one a row


def test_the_what_ifs_are_two_charts_on_the_page():
    """As one vconcat chart they were not refitted when the window narrowed: 230 px past a phone."""
    df = pf.what_if_frame(llama8b_plan(), 1024)
    drawn = [chart.to_dict() for chart in planner_charts.what_if_charts(df, 2000)]
    assert [d["layer"][0]["encoding"]["x"]["field"] for d in drawn] == ["kv_bytes_per_request",
                                                                         "max_concurrent_requests"]
    assert all("vconcat" not in d and "width" not in d for d in drawn)


def test_the_what_if_legend_lists_one_group_a_row():
    """A row of three, starting right of the 190 px variant labels, ran past a phone's edge."""
    df = pf.what_if_frame(llama8b_plan(), 1024)
    for chart in planner_charts.what_if_charts(df, 2000):
        legend = chart.to_dict()["layer"][0]["encoding"]["color"]["legend"]
        assert legend == {"direction": "vertical", "orient": "bottom"}


def test_the_longest_bars_hold_their_value_inside():
    """After the bar's end, the longest bars' values ("1000 MiB", "1,845") ran past a phone's edge."""
    df = pf.what_if_frame(llama8b_plan(), 1024)
    for chart, field in zip(planner_charts.what_if_charts(df, 2000), ("kv_bytes_per_request", "max_concurrent_requests")):
        bars, after, within = chart.to_dict()["layer"]
        cut = planner_charts.INSIDE_SHARE * df[field].max()
        assert after["transform"][-1] == {"filter": f"!(datum.{field} >= {cut})"} and after["mark"]["align"] == "left"
        assert within["transform"][-1] == {"filter": f"datum.{field} >= {cut}"} and within["mark"]["align"] == "right"
