"""A Live run's downloads: its trace, its offline HTML report and CSV tables (kvviz.live.report),
each built only when clicked."""
from __future__ import annotations

import streamlit as st

from kvviz.live import report
from kvviz.core.trace import Trace

def downloads(trace: Trace, wall_tokens_per_s: float | None = None) -> None:
    """The run as a trace, an offline HTML report and CSV tables (built only when clicked);
    `wall_tokens_per_s`: the rate this page measured for the run, for the report's figure."""
    cols = st.columns([1, 1, 1, 1, 2])
    cols[0].download_button("Trace (JSON)", trace.to_json(), "kvviz-trace.json", "application/json",
                            key="dl-trace")
    cols[1].download_button("Report (HTML)", lambda: report.html_report(trace, wall_tokens_per_s=wall_tokens_per_s), "kvviz-report.html",
                            "text/html", key="dl-report", on_click="ignore")
    cols[2].download_button("Steps (CSV)", lambda: report.csv_tables(trace)["steps"], "kvviz-steps.csv",
                            "text/csv", key="dl-csv", on_click="ignore")
    cols[3].download_button("Layers (CSV)", lambda: report.csv_tables(trace)["layers"],
                            "kvviz-layers.csv", "text/csv", key="dl-layers", on_click="ignore")
