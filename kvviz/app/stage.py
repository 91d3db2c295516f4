"""Whether the page is on stage (presenter mode): cheap to import, so app.py can ask it before the
heavy shell (kvviz.app.ui) is loaded."""
from __future__ import annotations

import os

import streamlit as st


def presenter_mode() -> bool:
    """`make present` (KVVIZ_PRESENT=1) or `?present=1` on any page's URL."""
    return os.environ.get("KVVIZ_PRESENT") == "1" or st.query_params.get("present") == "1"
