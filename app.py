"""kvviz: a Streamlit dashboard of a language model's KV cache. Run: `make run`."""
import sys

import streamlit as st

from kvviz.core import assets
from kvviz.app import hosted, stage, uploads  # light: cheap enough to run before anything is on the page

# A local file: a ":material/...:" page icon makes the browser fetch the favicon from fonts.gstatic.com.
FAVICON = assets.FOLDER / "favicon.png"
HEAVY = "kvviz.app.ui"  # imports torch and transformers: seconds on a fresh server


def sidebar_state(rules: hosted.Policy) -> str:
    """Closed on stage and for a hosted link's stranger; else "auto": open, closed on a phone."""
    return "collapsed" if stage.presenter_mode() or rules.enabled else "auto"


def import_ui():
    """kvviz.app.ui, with a loading line on the page while a fresh server imports it."""
    if HEAVY in sys.modules:
        from kvviz.app import ui
        return ui
    with st.spinner("Loading kvviz… (a fresh server takes a few seconds)", show_time=True):
        from kvviz.app import ui
    return ui


def pages(rules: hosted.Policy) -> list:
    """The navigation. A host that lists no vLLM server does not show the engine page in its menu,
    yet keeps it reachable (hidden): a link to /engine lands on a page that says why it is off,
    never on Streamlit's "Page not found"."""
    listed = [
        st.Page("app_pages/live.py", title="Live", icon=":material/bolt:", default=True),
        st.Page("app_pages/replay.py", title="Replay", icon=":material/replay:"),
        st.Page("app_pages/shrink.py", title="Shrink", icon=":material/compress:"),
        st.Page("app_pages/sweep.py", title="Sweep", icon=":material/stacked_line_chart:"),
        st.Page("app_pages/serving.py", title="Serving", icon=":material/view_module:"),
        st.Page("app_pages/planner.py", title="Capacity planner", icon=":material/calculate:"),
    ]
    offered = not rules.enabled or bool(rules.engine_urls)
    listed.append(st.Page("app_pages/engine.py", title="vLLM engine", icon=":material/dns:",
                          visibility="visible" if offered else "hidden"))
    return listed


rules = hosted.policy_from_env()
uploads.apply(rules)  # hosted: Streamlit's upload endpoint sized and bounded from the policy, first thing
st.set_page_config(page_title="kvviz", page_icon=FAVICON, layout="wide", initial_sidebar_state=sidebar_state(rules))
ui = import_ui()
ui.configure_server()
page = st.navigation(pages(rules))
ui.presenter_style(page.title)
page.run()
