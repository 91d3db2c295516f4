"""Shrink: the same prompt with the full KV cache and with a shrunk one (a kvpress press or
transformers' quantized cache), side by side: answers, where they diverge, bytes, step time, and
which prompt positions each layer kept. Widgets only: kvviz.shrink.compute runs, kvviz.shrink.panel draws."""
import time
from contextlib import nullcontext

import streamlit as st

from kvviz.app import links, ui
from kvviz.shrink import panel as shrink_panels
from kvviz.shrink import presses, quant_cache
from kvviz.shrink import compute as shrink

DRAW_EVERY_S = 0.15  # redraw both answers at most this often while the runs take turns
PRESS, QUANT = "Press (evict positions)", "Quantized cache"
PROMPT = shrink.DEFAULT_PROMPT  # a context and a question: long enough for SnapKV's scores to choose
URL = "query-params"  # settings are bound to the page's link (kvviz.app.links)
rules = ui.policy()
spec = ui.model_settings()
st.title("Shrink the cache")
st.caption("Both runs are greedy and measured here: bytes are read from the cache tensors after "
           "each step. A press evicts prompt positions once, after the prompt; a quantized cache "
           "stores older tokens in fewer bits and keeps the newest in full precision.")
lm = ui.load_model_with_progress(spec)
if lm is None:
    st.stop()
offered, refused = presses.offered()
backends, refused_backends = quant_cache.available()
st.sidebar.subheader("Shrink")
kind = st.sidebar.radio("Shrink by", [PRESS, QUANT], key="shrink_kind", bind=URL)
if kind == PRESS:
    name = st.sidebar.selectbox("Press", list(offered), key="shrink_press", bind=URL)
    ratio = st.sidebar.slider("Share of prompt positions evicted", 0.1, 0.9, 0.5, 0.1, key="shrink_ratio",
                              bind=URL)
    mode = shrink.ShrinkMode(press=name, ratio=ratio) if name else shrink.ShrinkMode()
    if name:
        st.sidebar.caption(offered[name])
    for why_name, why in refused.items():
        st.sidebar.caption(f"{why_name} is not offered: {why}")
else:
    backend = st.sidebar.selectbox("Backend", list(backends), key="shrink_backend", bind=URL)
    nbits = st.sidebar.selectbox("Bits", backends[backend], index=len(backends[backend]) - 1,
                                 key="shrink_nbits", bind=URL)
    residual = st.sidebar.slider("Residual (newest tokens kept in full precision)", 1, 128, 16,
                                 key="shrink_residual", disabled=backend == "fp8", bind=URL)
    mode = shrink.ShrinkMode(backend=backend, nbits=nbits, residual_length=residual)
    for why_name, why in refused_backends.items():
        st.sidebar.caption(f"{why_name} is not offered: {why}")
chars = rules.cap("prompt_chars", ui.MAX_PROMPT_CHARS)
with st.sidebar:  # a link's prompt (not bound: kvviz.app.links carries it up to its length)
    prompt = st.text_area("Prompt", ui.text_from_link("shrink_prompt", PROMPT, chars), max_chars=chars,
                          key="shrink_prompt")
new_tokens = st.sidebar.slider("New tokens", 2, rules.cap("new_tokens", 64), 24, key="shrink_new", bind=URL)
per_head = st.sidebar.toggle("Kept map per KV head", value=False, key="shrink_per_head", bind=URL)
ui.share_link([links.Text("shrink_prompt", "prompt", prompt, PROMPT)])
status = st.empty()
run_clicked = st.button("Run full and shrunk", type="primary", key="shrink_run")
stage = shrink_panels.Stage.make()


def run_both(ids, deadline: float) -> shrink.Comparison:
    """The two runs taking turns, each side's column filled as its tokens arrive."""
    runs = shrink.new_pair(mode)
    drawn = 0.0
    for turn in shrink.take_turns(lm, ids, new_tokens, mode, should_stop=lambda: time.monotonic() > deadline):
        shrink.add_turn(runs, turn, lm.tokenizer)
        if turn.side == shrink.SHRUNK and time.monotonic() - drawn > DRAW_EVERY_S:
            stage.heading.caption(f"Both runs take turns on the device: step {turn.step.step + 1} of {new_tokens}…")
            shrink_panels.draw_answers(stage, [runs[shrink.FULL], runs[shrink.SHRUNK]], final=False)
            drawn = time.monotonic()
    if time.monotonic() > deadline:
        status.warning(f"Stopped at this host's limit of {rules.max_run_s:.0f} s per run.")
    return shrink.comparison(runs)


settings = (spec.name, mode, prompt, new_tokens)
if run_clicked:
    try:
        rules.check_limits(spec.name, new_tokens=new_tokens, prompt_chars=len(prompt))
        ids = shrink.prompt_ids(lm.tokenizer, prompt)
        rules.check_prompt_tokens(ids.shape[1])
        st.session_state.pop("shrink", None)  # a new run: the old result is not this one's
        with ui.device_turn(status) if rules.enabled else nullcontext():
            deadline = time.monotonic() + rules.max_run_s if rules.enabled else float("inf")
            result = run_both(ids, deadline)
        st.session_state["shrink"] = (result, lm.tokenizer.batch_decode([[t] for t in ids[0].tolist()]), settings)
    except ValueError as exc:
        st.error(f"Cannot run: {ui.visitor_text(exc, 'shrink run')}")

if "shrink" not in st.session_state:
    status.info("Pick a press or a quantized cache in the sidebar, then press **Run full and shrunk**.")
    st.stop()
result, prompt_pieces, ran_with = st.session_state["shrink"]
if ran_with != settings:
    status.warning("These results are from the previous settings (model, shrink mode, prompt or "
                   "tokens changed since): press **Run full and shrunk** to run the current ones.")
shrink_panels.draw_result(stage, result, prompt_pieces, per_head, key="shrink")
shrink_panels.downloads(result, prompt_pieces, lm.label, key="shrink")
