"""The Live page's sidebar: the prompt, the generation settings and what the page shows while a run
goes on (pace, race, token boundaries), each bound to the page's link; the model's box is every
page's (kvviz.app.ui.model_settings)."""
from __future__ import annotations

import time
from dataclasses import dataclass

import streamlit as st

from kvviz.app import links, ui
from kvviz.core.config import LoadConfig, RunConfig

PACES = {"Real time": 1.0, "Slow motion ×4": 4.0, "Slow motion ×10": 10.0, "Slow motion ×30": 30.0}


def pace_name(pace: float) -> str:
    return next((name for name, value in PACES.items() if value == pace), "Real time")


@dataclass(frozen=True)
class LiveOptions:
    race: bool = True  # run the no-cache race beside the cached run
    pace: float = 1.0  # 1 = real time; 4 = every step shown 4× as long as it took
    show_tokens: bool = False  # draw token boundaries in the text


def prompt_settings() -> tuple[str, str, bool]:
    st.sidebar.subheader("Prompt")
    presets = ui.prompt_presets()
    choice = st.sidebar.selectbox("Preset", list(presets) + ["Free text"], key="preset",
                                  bind="query-params")
    chars = ui.policy().cap("prompt_chars", ui.MAX_PROMPT_CHARS)
    preset = linked_prompt(choice, presets.get(choice) or dict.fromkeys(links.PROMPT_KEYS, ""), chars)
    system = st.sidebar.text_area("System prompt", value=preset["system"], key=f"system-{choice}",
                                  max_chars=chars)
    prompt = st.sidebar.text_area("Prompt", value=preset["prompt"], key=f"prompt-{choice}", height=120,
                                  max_chars=chars)
    chat = st.sidebar.toggle("Chat template", value=True, key="chat", bind="query-params")
    return system, prompt, chat


def run_settings(system: str, prompt: str, chat: bool) -> RunConfig:
    st.sidebar.subheader("Generation")
    rules, bound = ui.policy(), {"bind": "query-params"}
    max_new = st.sidebar.slider("Max new tokens", 1, rules.cap("new_tokens", 512), 64, key="max_new", **bound)
    batch = st.sidebar.slider("Batch size", 1, rules.cap("batch", 16), 1, key="batch",
                              help="copies of the prompt", **bound)
    block = st.sidebar.select_slider("Block size", [1, 2, 4, 8, 16, 32, 64, 128], value=16, key="block",
                                     **bound)
    backend = st.sidebar.radio("Cache", ["dynamic", "static"], horizontal=True, key="backend", **bound)
    greedy = st.sidebar.toggle("Greedy", value=True, key="greedy", **bound)
    temperature, top_p, top_k, seed = 0.0, 1.0, 0, 0
    if not greedy:
        temperature = st.sidebar.slider("Temperature", 0.05, 2.0, 0.8, key="temperature", **bound)
        top_p = st.sidebar.slider("Top-p", 0.05, 1.0, 0.95, key="top_p", **bound)
        top_k = st.sidebar.number_input("Top-k (0 = off)", 0, 1000, 0, key="top_k", **bound)
        seed = st.sidebar.number_input("Seed", 0, 2**31 - 1, 0, key="seed", **bound)
    return RunConfig(prompts=(prompt,), batch=batch, max_new_tokens=max_new, chat_template=chat,
                     system=system, temperature=temperature, top_k=int(top_k), top_p=top_p,
                     seed=int(seed), block_size=block, cache_backend=backend)


def live_settings() -> LiveOptions:
    st.sidebar.subheader("Show")
    race = st.sidebar.toggle("Race a no-cache run", value=True, key="race", bind="query-params")
    pace = st.sidebar.radio("Playback pace", list(PACES), key="pace", bind="query-params")
    tokens = st.sidebar.toggle("Token boundaries", value=False, key="show_tokens", bind="query-params")
    return LiveOptions(race=race, pace=PACES[pace], show_tokens=tokens)


def sidebar() -> tuple[LoadConfig, RunConfig, LiveOptions]:
    load_config = ui.model_settings()
    cfg = run_settings(*prompt_settings())
    opts = live_settings()
    choice = st.session_state.get("preset")
    ui.share_link(links.prompt_texts(choice, ui.prompt_presets().get(choice), cfg.system, cfg.prompts[0]))
    return load_config, cfg, opts


def linked_prompt(choice: str, preset: dict, chars: int) -> dict:
    """The prompt boxes' first text for `choice`: the preset's own, or what the link that opened
    this page carried for it (only for the preset that link named; cut to `chars`, said so)."""
    link = st.session_state.setdefault("link_prompt", {"preset": choice, "params": {
        k: st.query_params[k] for k in links.PROMPT_KEYS if k in st.query_params}})
    if link["preset"] != choice:
        return preset
    texts, cut = links.linked_texts(link["params"], preset, chars)
    if cut:
        st.sidebar.caption(f"This link's {' and '.join(cut)} text is longer than the {chars:,} "
                           "characters a box takes here: cut to fit.")
    return texts


def pace_delay(step_ms: float, pace: float) -> None:
    """Stretch a step on screen to `pace` times its measured length (slow motion)."""
    if pace > 1.0:
        time.sleep(step_ms * (pace - 1.0) / 1000)
