"""Charts and tables as files (kvviz.viz.export): a CSV whose text cells a spreadsheet never runs as
formulas (numbers untouched), and a Vega-Lite chart drawn to SVG and PNG by vl-convert at Altair's
Vega-Lite version. (That a chart asking for a URL fetches nothing: tests/live/test_report.py.)"""
import csv
import io

import altair as alt
import pandas as pd

from kvviz.viz import export

CHART = {"data": {"values": [{"a": 1, "b": 2}, {"a": 2, "b": 5}]}, "mark": "point",
         "encoding": {"x": {"field": "a", "type": "quantitative"}, "y": {"field": "b", "type": "quantitative"}},
         "width": 100, "height": 50}


def test_a_cell_that_would_run_as_a_formula_gets_an_apostrophe_first():
    for text in ("=HYPERLINK(\"http://x\")", "+1-2", "-2+3", "@SUM(A1)", "\tx", "\rx"):
        assert export.inert_cell(text) == "'" + text
    for cell in ("a=b", "", "plain", -3, 2.5, None):
        assert export.inert_cell(cell) == cell


def test_csv_keeps_numbers_and_makes_text_and_headers_inert():
    df = pd.DataFrame({"=name": ["=cmd|' /C calc'!A0", "ok"], "delta_ms": [-1.5, 2.0]}, index=[7, 8])
    rows = list(csv.reader(io.StringIO(export.csv_text(df))))
    assert rows == [["'=name", "delta_ms"], ["'=cmd|' /C calc'!A0", "-1.5"], ["ok", "2.0"]]  # no index
    assert list(df.columns) == ["=name", "delta_ms"]  # the caller's frame is left as it was


def test_a_chart_becomes_an_svg_document_and_a_png_image():
    assert export.vl_version() == ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    svg = export.svg(CHART)
    assert svg.lstrip().startswith("<svg") and svg.count("<path") >= 2 and "class=\"mark-symbol" in svg
    png = export.png(CHART, scale=2.0)
    width = int.from_bytes(png[16:20], "big")  # the IHDR chunk's width
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and width > 2 * 100  # twice the CSS width, axes included
    assert int.from_bytes(export.png(CHART, scale=1.0)[16:20], "big") * 2 == width
