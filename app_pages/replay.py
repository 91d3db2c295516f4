"""Replay: play a recorded run through the live panels. Needs no model and no GPU."""
import streamlit as st

from kvviz import panels, ui
from kvviz.vllm import panels as vllm_panels
from kvviz.trace import TraceError

st.title("Replay a recorded run")
st.caption("Traces come from `kvviz record` or the Live page's download. Replaying needs no model.")
examples = ui.example_traces()
source = st.radio("Trace", list(examples) + ["Upload a file"], horizontal=True, key="replay_source",
                  bind="query-params")
upload = None
if source == "Upload a file":
    upload = ui.trace_uploader()
try:
    watch = vllm_panels.read_watch(examples.get(source), upload)  # a vLLM watch: its own panels
    if watch is not None:
        vllm_panels.replay_page(watch)
        st.stop()
    trace = ui.read_trace(examples.get(source), upload)
except TraceError as exc:
    st.error(f"Cannot replay this file: {ui.inert(exc)}")
    st.stop()
if trace is None:
    st.info("Choose an example trace or upload one.")
    st.stop()
st.caption(ui.trace_origin(trace))
speed_col, step_col, play_col = st.columns([2, 4, 1], vertical_alignment="bottom")
speed = speed_col.select_slider("Speed", list(ui.SPEEDS), value="1×", key="replay_speed")
steps = len(trace.events_of("cached"))
upto = step_col.slider("Step", 1, steps, steps, key="replay_step") if steps > 1 else 1
play = play_col.button("Play", type="primary", key="replay_play")
show_tokens = st.toggle("Token boundaries", key="replay_tokens")
panels.replay(trace, ui.SPEEDS[speed], show_tokens, upto_step=None if play else upto - 1)
