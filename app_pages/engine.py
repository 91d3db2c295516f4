"""vLLM engine: attach to running vLLM servers and watch their real KV cache, live.

The URLs are bound to the page's link (`?engine_urls=...`). In hosted mode only the host's list
(KVVIZ_ENGINE_URLS) can be chosen, at most the policy's `max_engines` at once, through the same
`Policy.check_limits` as every page: a link naming any other URL gets one sentence and that URL
is never contacted, and visitors cannot disconnect the watches other visitors share.
Without one, the box starts at KVVIZ_VLLM_URL (`make vllm-demo` sets it to its own server).
"""
import os

import streamlit as st

from kvviz.app import ui
from kvviz.vllm import fleet, panel
from kvviz.core.errors import UserError
from kvviz.vllm.client import DEFAULT_URL, EngineError, normalize_url

st.title("vLLM engine · a real serving engine's KV cache, live")
rules = ui.policy()
link = ui.share_link(settings="these servers and settings")
allowed = list(rules.engine_urls)
linked = [*st.query_params.get_all("engine_urls_hosted"), *st.query_params.get_all("engine_urls")]
if rules.enabled and not allowed:
    st.info("Watching vLLM servers is off on this hosted kvviz: the host lists none (KVVIZ_ENGINE_URLS), so "
            "this page is not in its menu. Every other page works without one: the menu is in the sidebar "
            "(» at the top left opens it).")
    st.page_link("app_pages/live.py", label="Open Live: a small model's KV cache, live", icon=":material/bolt:")
    st.stop()
st.caption("kvviz subscribes to the server's KV-cache events (ZMQ; blocks stored, evicted, cleared) "
           "and reads its Prometheus `/metrics`. Each number says where it comes from: "
           "**events**, **metrics**, or **derived** from both. Start a server with `make vllm-demo`.")
url_col, live_col, every_col, stop_col = st.columns([5, 1.5, 2, 1.6], vertical_alignment="bottom")  # "Live" uncut at 1280
if rules.enabled:
    chosen = url_col.multiselect("vLLM servers", allowed, default=allowed[:1], key="engine_urls_hosted",
                                 bind="query-params")  # drops what it does not offer: `linked` keeps it
    try:  # what a link named beyond the list: said, never contacted
        rules.check_limits(None, engine_urls=[u for u in linked if u not in allowed])
    except UserError as exc:
        st.error(f"Ignoring this link's other servers: {ui.inert(exc)}.")
    try:
        rules.check_limits(None, engine_urls=chosen)
    except UserError as exc:
        st.error(f"Cannot watch these servers: {ui.inert(exc)}.")
        st.stop()
else:
    typed = url_col.text_area("vLLM base URLs, one per line (several servers side by side)",
                              os.environ.get("KVVIZ_VLLM_URL", "").strip() or DEFAULT_URL, height=68,
                              key="engine_urls", bind="query-params")
    chosen = [line for line in typed.splitlines() if line.strip()]
urls = []
for raw in chosen:
    try:
        urls.append(normalize_url(raw))
    except EngineError as exc:
        st.error(ui.inert(exc))
live = live_col.toggle("Live", value=True, key="engine_live", help="Off: freeze the picture",
                       bind="query-params")
every_s = every_col.select_slider("Refresh every", [1.0, 2.0, 5.0], value=2.0, key="engine_every",
                                  format_func=lambda s: f"{s:g} s", bind="query-params")
link()  # again, with every setting drawn
if not rules.enabled and stop_col.button("Disconnect all", key="engine_disconnect"):
    for url in urls:
        panel.watch_for(url).stop()
    panel.watch_for.clear()
    st.info("Disconnected. Turn Live off and on, or edit the URLs, to attach again.")
    st.stop()
if not urls:
    st.info("Enter the base URL of a vLLM server, e.g. http://127.0.0.1:8000.")
    st.stop()


@st.fragment(run_every=every_s if live else None)
def live_panels() -> None:
    watches = [panel.watch_for(url) for url in urls]
    ended = panel.demo_ended()
    if ended:  # the demo's server is gone on purpose: say so, stop retrying
        st.success(panel.DEMO_ENDED, icon=":material/check_circle:")
    for watch in watches:
        if ended:  # a statement, not an expression: Streamlit's magic would print its None
            watch.stop()
        else:
            panel.show_status(watch)
    states, meta, notes = panel.snapshot(watches)
    panel.show_engines(states, panel.text_fns(meta), "live", meta=meta)
    recording = fleet.merged(watches)
    if fleet.wanted(recording):  # two servers or more, or a request log
        panel.show_fleet(recording, states, "live")
    panel.show_notes(notes)
    panel.download(watches)


live_panels()
