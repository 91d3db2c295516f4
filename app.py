"""kvviz: a Streamlit dashboard of a language model's KV cache. Run: `make run`."""
from pathlib import Path

import streamlit as st

from kvviz.app import ui

# A local file: a ":material/...:" page icon makes the browser fetch the favicon from fonts.gstatic.com.
FAVICON = Path(__file__).resolve().parent / "kvviz" / "assets" / "favicon.png"
st.set_page_config(page_title="kvviz", page_icon=FAVICON, layout="wide",
                   initial_sidebar_state="collapsed" if ui.presenter_mode() else "expanded")
ui.configure_server()
ui.presenter_style()
page = st.navigation([
    st.Page("app_pages/live.py", title="Live", icon=":material/bolt:", default=True),
    st.Page("app_pages/replay.py", title="Replay", icon=":material/replay:"),
    st.Page("app_pages/shrink.py", title="Shrink", icon=":material/compress:"),
    st.Page("app_pages/sweep.py", title="Sweep", icon=":material/stacked_line_chart:"),
    st.Page("app_pages/serving.py", title="Serving", icon=":material/view_module:"),
    st.Page("app_pages/planner.py", title="Capacity planner", icon=":material/calculate:"),
    st.Page("app_pages/engine.py", title="vLLM engine", icon=":material/dns:"),
])
page.run()
