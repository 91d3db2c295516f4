"""Shrink charts (kvviz.shrink.charts): the kept map sized by its rows (issue 40; the sweep's charts:
test_sweep_charts.py)."""
from kvviz.shrink import charts as sc


def test_the_kept_map_takes_its_height_from_its_rows():
    """A fixed 120 px: the legend and the axis took it all, each layer's row 0.25 px high."""
    kept = {0: [[0, 1, 5]], 1: [[2, 3, 5]]}
    df = sc.kept_map_frame(kept, 6, list("abcdef"))
    vega = sc.kept_map_chart(df).to_dict()
    assert vega["height"] == {"step": 22}
