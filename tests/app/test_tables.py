"""Tables and charts for people (kvviz.app.tables), on a page drawn by AppTest: each column kind's
label and format, counts rounded as the CLIs round, bytes in binary units, bytes/s in GB/s, missing
values as "–"; and an Altair chart's text 1.5 × larger on stage, sized by the page."""
import json

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.app import tables
from kvviz.core.units import fmt_bytes


def table_and_chart_page():
    import altair as alt
    import pandas as pd
    import streamlit as st

    from kvviz.app import tables

    df = pd.DataFrame({"a": [1, 2], "b": [3, 4]})
    tables.draw_altair(st, alt.Chart(df).mark_point().encode(x="a", y="b"), key="chart")
    rows = pd.DataFrame({"n": [989.7, None], "kv": [1536, None], "bw": [2.5e9, 1e9], "name": ["x", "y"],
                         "ok": [True, False], "hidden": [0, 0]})
    tables.people_table(rows, {"n": ("Count", "count"), "kv": ("KV", "bytes"), "bw": ("Speed", "gbs_from_bytes"),
                               "name": ("Name", "text"), "ok": ("OK", "flag")}, key="table")


@pytest.mark.slow
def test_a_people_table_and_a_chart_off_and_on_stage():
    at = AppTest.from_function(table_and_chart_page, default_timeout=60).run()
    assert not at.exception
    shown = at.dataframe[0].value
    assert list(shown.columns) == ["n", "kv", "bw", "name", "ok"]  # only the columns asked for
    assert shown["n"].iloc[0] == 990 and shown["kv"].tolist() == [fmt_bytes(1536), "–"] == ["1.5 KiB", "–"]
    assert shown["bw"].tolist() == [2.5, 1.0]  # bytes/s as GB/s
    config = json.loads(at.dataframe[0].proto.columns)
    assert config["n"] == {"label": "Count", "type_config": {"type": "number", "format": tables.NUMBER_FORMATS["count"]}}
    assert config["bw"]["type_config"]["format"] == "%,.2f GB/s" and config["kv"]["type_config"] == {"type": "text"}
    assert config["ok"]["type_config"]["type"] == "checkbox" and config["name"]["label"] == "Name"

    def chart_config():
        return json.loads(at.get("vega_lite_chart")[0].proto.spec).get("config") or {}

    assert "labelFontSize" not in chart_config().get("axis", {})  # Streamlit's own sizes off stage
    at.query_params["present"] = "1"
    at.run()
    assert not at.exception
    on_stage = chart_config()
    assert on_stage["axis"]["labelFontSize"] == {"expr": "windowSize()[0] < 700 ? 12 : 18"}  # 12 px × 1.5
    assert not {"continuousWidth", "continuousHeight"} & set(on_stage["view"])  # the page sizes it
