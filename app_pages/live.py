"""Live: generate and watch the KV cache grow, beside a run that recomputes without it."""
from dataclasses import replace

import streamlit as st

from kvviz.app import keys, ui
from kvviz.live import panel
from kvviz.live import cache_map_panel
from kvviz.live import tour_panel
from kvviz.live import run_panel
from kvviz.live import settings_panel
from kvviz.live import words

load_config, cfg, opts = settings_panel.sidebar()
if st.sidebar.toggle("Attention over the cache", value=False, key="attention", bind="query-params",
                     help=cache_map_panel.ATTENTION_HELP):
    load_config, cfg = replace(load_config, attn_implementation="eager"), replace(cfg, attention=True)
tour_on = st.sidebar.toggle("Guided tour", value=ui.policy().enabled, key="tour", bind="query-params",
                            help=tour_panel.TOGGLE_HELP)  # on for a hosted visitor, off for engineers
st.sidebar.page_link("app_pages/replay.py", label="Replay a recorded run", icon=":material/replay:",
                     help="Plays a run recorded earlier through these panels: no model needed")
presenting = ui.presenter_mode()
st.title("kvviz · the KV cache, live")
if not presenting:  # on stage the speaker explains; the screen keeps its height for the run
    panel.intro()
panel.preload_charts()
lm = ui.load_model_with_progress(load_config)
buttons, *rest = st.columns([2, 2, 4] if presenting else [2, 6], vertical_alignment="center")
info = rest[-1]
with buttons.container(horizontal=True, gap="small"):  # each button as wide as its label: none cut at 1280
    generate = st.button("Generate", type="primary", disabled=lm is None, key="generate", shortcut=keys.GENERATE)
    stopped = st.button("Stop", key="stop", shortcut=keys.STOP)
if presenting:  # the sidebar is closed on stage: slow motion sits beside Generate
    names = list(settings_panel.PACES)
    opts = replace(opts, pace=settings_panel.PACES[rest[0].selectbox(
        "Pace", names, index=names.index(settings_panel.pace_name(opts.pace)), key="stage_pace",
        label_visibility="collapsed", help="Slow motion shows every step this many times as long as it "
                                           "took, to explain one step while it happens")])
if not presenting:  # what Generate will send (the explainer, one click away, ends the page)
    panel.prompt_line(cfg, info)
status = st.empty()
keys.pace_key(list(settings_panel.PACES), settings_panel.pace_name(opts.pace), ("pace", "stage_pace"))  # P: hidden, takes no room
tour = tour_panel.TourPanel.placed(st, st.session_state, st.fragment) if tour_on else None
if lm is not None:
    info.caption(f"{ui.inert(lm.label)} · {lm.device.type} · {str(lm.dtype).removeprefix('torch.')} · "
                 f"weights {lm.weight_bytes / 2**20:,.0f} MiB")
if generate and lm is not None:
    run_panel.run_live(lm, cfg, opts, status, tour)
elif "trace" in st.session_state:
    changed = panel.changed_settings(st.session_state["trace"].meta, cfg,
                                      "recompute" in st.session_state["trace"].modes, opts.race) if not stopped else []
    if stopped and not st.session_state.get("run_done", True):
        status.info("Stopped. What was produced is kept below.")
    elif changed:  # the names are kvviz's own labels, never user text
        status.warning(f"Outdated: {', '.join(changed)} changed since this run; what is shown below was "
                       "made with the earlier settings. Press **Generate** to run the new ones.")
    panel.show_result(st.session_state["trace"], opts.show_tokens, tour)
elif lm is not None:
    status.info(f"Press **Generate** to start. Pick a prompt and settings in the sidebar {words.SIDEBAR_WHERE}.")
else:
    status.info("Generate is off until a model is loaded: see the message above, and pick another "
                f"model in the sidebar {words.SIDEBAR_WHERE} if this one cannot load.")
if not presenting:  # below the run: a run's texts and map come first (before one, right under the tour)
    panel.explainer()
