"""vLLM engine charts (kvviz.vllm.charts) keep their plots: each grows around a plot of its own
height (issue 37; the shipped watch's Replay page is drawn and read in Chromium by
tests/browser/test_readable.py)."""
import pandas as pd

from kvviz.vllm import charts, views

FIT_WIDTH = {"type": "fit-x", "contains": "padding"}


def test_the_pool_bar_has_its_row_and_the_chart_grows_for_its_legend():
    """Fitted into 60 px with its three-line legend and axis, the pool's bar was 0 px high."""
    pool = pd.DataFrame({"part": list(views.POOL_COLORS), "blocks": [3, 60, 8], "order": [0, 1, 2]})
    vega = charts.pool_chart(pool, 71).to_dict()
    assert vega["height"] == 40 and vega["autosize"] == FIT_WIDTH


def test_the_lines_keep_their_plot_height_under_a_four_line_legend():
    """Fitted into 240 px with four legend lines above, the plot was 28 px high."""
    history = pd.DataFrame(columns=["t_s", "series", "blocks"])
    vega = charts.lines_chart(history, "blocks", views.OVER_TIME, "blocks").to_dict()
    assert vega["height"] == 160 and vega["autosize"] == FIT_WIDTH
    assert charts.lines_chart(history, "blocks", views.OVER_TIME, "blocks", plot_px=120).to_dict()["height"] == 120


def test_the_prefix_tree_legend_sits_under_its_rows():
    tree = pd.DataFrame({"sequence": ["a"], "position": [0], "shared_by": [2], "block": ["x"], "text": ["t"]})
    vega = charts.tree_chart(tree).to_dict()
    assert vega["encoding"]["color"]["legend"]["orient"] == "bottom" and vega["autosize"] == FIT_WIDTH


