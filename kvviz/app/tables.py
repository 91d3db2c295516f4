"""Tables and Altair charts for people, shared by every feature's panel: number formats, byte
units, and chart text scaled in presenter mode."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from kvviz.app import ui
from kvviz.core.units import fmt_bytes
from kvviz.viz import charts


def draw_altair(slot, chart, key: str | None = None) -> None:
    """An Altair chart into `slot` (st or a placeholder), its text scaled in presenter mode."""
    scale = ui.chart_font_scale()
    if scale == 1:
        slot.altair_chart(chart, key=key)
        return
    vega = chart.to_dict()
    view = vega.get("config", {}).get("view", {})
    for size in ("continuousWidth", "continuousHeight"):  # as st.altair_chart: the page sizes it
        view.pop(size, None)
    slot.vega_lite_chart(charts.with_font_scale(vega, scale), key=key)


NUMBER_FORMATS = {"count": "%,d", "ms": "%,.1f ms", "ms2": "%,.2f ms", "s": "%,.1f s", "number": "%,.1f",
                  "gbs": "%,.2f GB/s"}  # column kind -> how st.dataframe shows it


def people_table(df: pd.DataFrame, columns: dict[str, tuple[str, str]], key: str | None = None) -> None:
    """`df`'s `columns` as a table for people: column -> (label, kind), kind one of
    NUMBER_FORMATS, "bytes" (B / KiB / MiB / GiB text), "gbs_from_bytes" (bytes/s shown in GB/s),
    "text" or "flag". Missing values read "–"."""
    shown, config = df[list(columns)].copy(), {}
    for col, (label, kind) in columns.items():
        if kind == "bytes":
            shown[col] = [fmt_bytes(v) if pd.notna(v) else "–" for v in shown[col]]
            config[col] = st.column_config.TextColumn(label)
        elif kind == "gbs_from_bytes":
            shown[col] = pd.to_numeric(shown[col], errors="coerce") / 1e9
            config[col] = st.column_config.NumberColumn(label, format=NUMBER_FORMATS["gbs"])
        elif kind == "count":  # rounded as the CLIs round (the format alone would truncate 989.7 to 989)
            shown[col] = [round(v) if pd.notna(v) else None for v in shown[col]]
            config[col] = st.column_config.NumberColumn(label, format=NUMBER_FORMATS[kind])
        elif kind in NUMBER_FORMATS:
            config[col] = st.column_config.NumberColumn(label, format=NUMBER_FORMATS[kind])
        elif kind == "flag":
            config[col] = st.column_config.CheckboxColumn(label)
        else:
            config[col] = st.column_config.TextColumn(label)
    st.dataframe(shown, hide_index=True, column_config=config, key=key)
