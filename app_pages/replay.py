"""Replay: play a recorded run through the live panels. Needs no model and no GPU."""
import streamlit as st

from kvviz.app import ui
from kvviz.live import panel
import kvviz.shrink.panel
import kvviz.vllm.panel
import kvviz.replay.panel
from kvviz.replay import player
from kvviz.core.trace import TraceError

presenting = ui.presenter_mode()
if presenting:  # on stage: title and controls in one row, the trace choice tucked in a popover,
    # so the figures, both texts and the cache map start above the fold at 1280 x 720
    title_col, pick_col, speed_col, step_col, play_col = st.columns([1.3, 1.2, 1.9, 3.1, 2.5],
                                                                    vertical_alignment="bottom")
    title_col.title("Replay")
    options = pick_col.popover("Trace", icon=":material/tune:", width="stretch", key="replay_options")
else:
    st.title("Replay a recorded run")
    st.caption("Traces come from `kvviz record` or the Live page's download. Replaying needs no model.")
    options = st.container()
examples = ui.example_traces()
with options:
    source = st.radio("Trace", list(examples) + ["Upload a file"], horizontal=not presenting,
                      key="replay_source", bind="query-params")
    upload = kvviz.replay.panel.trace_uploader() if source == "Upload a file" else None
link = ui.share_link(settings="this trace and how it plays", notes=[
    "An uploaded file is not in a link: whoever opens it uploads the file again."] if upload is not None else [])
try:
    watch = kvviz.vllm.panel.read_watch(examples.get(source), upload)  # a vLLM watch: its own panels
    if watch is not None:
        kvviz.vllm.panel.replay_page(watch)
        st.stop()
    compared = kvviz.shrink.panel.read_record(examples.get(source), upload)  # a shrink comparison
    if compared is not None:
        kvviz.shrink.panel.replay_page(compared)
        st.stop()
    trace = kvviz.replay.panel.read_trace(examples.get(source), upload)
except TraceError as exc:
    st.error(f"Cannot replay this file: {ui.inert(exc)}")
    st.stop()
if trace is None:
    st.info("Choose an example trace or upload one.")
    st.stop()
(options if presenting else st).caption(kvviz.replay.panel.trace_origin(trace))
if not presenting:
    speed_col, step_col, play_col = st.columns([2, 4, 2], vertical_alignment="bottom")
with speed_col:
    speed = st.select_slider("Speed", list(ui.SPEEDS), value="1×", key="replay_speed", bind="query-params",
                             help="How fast the recorded steps play back: ¼× takes four times as long as the "
                                  "run did; instant draws each step without waiting")
    if not presenting:  # on stage the row stays one line high
        slow_end, fast_end = st.columns(2)
        slow_end.caption("◀ slower")
        fast_end.caption("faster ▶", text_alignment="right")
playback = kvviz.replay.panel.replay_player(trace, ui.SPEEDS[speed])
playback.advance()  # playing: the step due now, set on the slider before it is drawn
# bound to the address while paused: playing, each step's address change made the slider trail more
shown = step_col.slider("Step", 1, playback.steps, playback.steps, key=player.STEP,
                        bind=None if playback.playing else "query-params") if playback.steps > 1 else 1
kvviz.replay.panel.replay_buttons(play_col, playback)
show_tokens = (options if presenting else st).toggle("Token boundaries", key="replay_tokens", bind="query-params")
link()  # again, with every setting drawn
panel.replay(trace, show_tokens, upto_step=shown - 1, downloadable=not playback.playing)
playback.next_step(shown, st.rerun)  # playing: the next step's script run, when it is due
