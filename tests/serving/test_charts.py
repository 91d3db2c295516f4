"""Serving charts fit a phone and keep every legend entry in view (issue 37; drawn and read in
Chromium by tests/browser/test_readable.py)."""
import pandas as pd

from kvviz.serving import charts as sc

IDS = ["r0", "r1", "r2", "r3"]


def test_the_pool_grid_fits_a_phone_with_its_legend_in_rows_under_it():
    """16 columns of 26 px and a 7-column legend ran 33 px past a 390 px screen."""
    grid = pd.DataFrame({"block": range(40), "row": [i // 16 for i in range(40)], "col": [i % 16 for i in range(40)],
                         "owner": (IDS + ["shared", "cached", "free"] * 12)[:40], "label": ""})
    vega = sc.pool_grid_chart(grid, IDS, 40).to_dict()
    assert vega["width"] == vega["height"] == {"step": sc.GRID_CELL_PX} and 16 * sc.GRID_CELL_PX <= 330
    legend = vega["layer"][0]["encoding"]["color"]["legend"]
    assert legend["columns"] == sc.GRID_LEGEND_COLUMNS and legend["orient"] == "bottom"


def test_the_lanes_legend_wraps_under_the_lanes_and_the_chart_grows_with_it():
    """Beside four lanes, on stage, the five states' legend was taller than the chart: 'finished' cut."""
    lanes = pd.DataFrame({"step": [1, 2], "request_id": ["r0", "r1"], "state": ["decoding", "finished"],
                          "cached_tokens": [0, 0], "blocks": [1, 1]})
    vega = sc.timeline_chart(lanes, IDS, 2).to_dict()
    assert vega["encoding"]["color"]["legend"] == {"columns": sc.STATE_COLUMNS, "orient": "bottom"}
    assert vega["autosize"] == {"type": "fit-x", "contains": "padding"}


def test_the_usage_axis_keeps_its_last_label_inside():
    usage = sc.usage_chart(pd.DataFrame(columns=["step", "series", "blocks"]), 64, 30).to_dict()
    assert usage["layer"][0]["encoding"]["x"]["axis"] == {"labelFlush": True}
