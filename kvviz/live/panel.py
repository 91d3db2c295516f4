"""The Live page's panels as the page calls them: its words (intro, the prompt line, the
explainer), the chart code's preload, a finished run's panels and the settings changed since it,
and a recorded run's panels at one step for the Replay page.

The parts: the view of a run (kvviz.live.view_panel), the run controller (kvviz.live.run_panel),
the stylesheets (kvviz.live.stylesheet), the downloads (kvviz.live.downloads_panel), when each
part may draw (kvviz.live.cadence).
"""
from __future__ import annotations

from dataclasses import asdict

import streamlit as st

from kvviz.engine import race
from kvviz.live import words
from kvviz.live import stylesheet
from kvviz.live import view_panel
from kvviz.live import downloads_panel
from kvviz.core import assets
from kvviz.core.meta import RunMeta
from kvviz.core.trace import Trace

PRELOAD_DESCRIPTION = "kvviz: preloads the chart code"


def preload_charts() -> None:
    """An invisible empty chart and figure card, so the browser fetches their code while the page
    is idle.

    Streamlit loads the Vega-Lite and the metric components on first use; until the chart code
    arrives every chart is a grey placeholder box, which a run's first frames would otherwise show,
    and until the metric code arrives the figures row's hidden copy (metric_cards) has no height:
    on a first run it took ~0.4 s, and the row grew under the panels as the figures came.
    """
    st.html(stylesheet.PRELOAD_CSS)  # a fixed stylesheet, never user text
    with st.container(key="chart-preload"):
        st.vega_lite_chart({"mark": "point", "description": PRELOAD_DESCRIPTION, "data": {"values": []}},
                           height=10)
        st.metric(PRELOAD_DESCRIPTION, "–")


SETTING_NAMES = {"prompts": "prompt", "batch": "batch", "max_new_tokens": "new tokens", "system": "system prompt",
                 "chat_template": "chat template", "stop_on_eos": "stop at EOS", "temperature": "temperature",
                 "top_k": "top-k", "top_p": "top-p", "seed": "seed", "block_size": "block size",
                 "cache_backend": "cache", "attention": "attention"}


def changed_settings(meta: RunMeta, cfg, ran_race: bool, race_on: bool) -> list[str]:
    """The settings that differ between the run shown (its trace's meta) and the sidebar now."""
    ran = meta.config or {}
    now = {k: v for k, v in asdict(cfg).items() if k != "extra"}
    changed = [SETTING_NAMES.get(k, k) for k, v in now.items()
               if k in ran and (list(v) if isinstance(v, tuple) else v) != (
                   list(ran[k]) if isinstance(ran[k], (tuple, list)) else ran[k])]
    if race_on != ran_race:
        changed.append("no-cache race")
    return changed


def show_result(trace: Trace, show_tokens: bool, tour=None) -> None:
    """The panels of a finished (or stopped) run, from its trace."""
    view = view_panel.prompt_and_view(None, trace.meta, trace.meta.setting("max_new_tokens", len(trace.events_of("cached"))),
                           "recompute" in trace.modes, show_tokens)
    view.arrivals = st.session_state.get("run_arrivals", [])  # this page's run, a stopped one too
    view.wall_rate = view.wall_tokens_per_s()
    view.tour = tour
    view.update(trace, final=True)
    if trace.events:  # a Stop during the prefill leaves nothing worth downloading
        downloads_panel.downloads(trace, view.wall_rate)


def replay(trace: Trace, show_tokens: bool, upto_step: int | None = None, downloadable: bool = True) -> None:
    """A recorded run's panels at one cached step (`upto_step`, 0 = the prefill; None: the last):
    the texts, the figures, the map and every chart drawn from the same events, so they all show
    that one step. Playback draws one step per script run (kvviz.replay.player)."""
    cached = trace.events_of("cached")
    last = len(cached) - 1 if upto_step is None else min(max(upto_step, 0), len(cached) - 1)
    order = race.through_step(race.race_order(cached, trace.events_of("recompute")), last)
    view = view_panel.prompt_and_view(None, trace.meta, len(cached), "recompute" in trace.modes, show_tokens)
    view.scrubbing = last < len(cached) - 1
    view.update(Trace(trace.meta, order), final=True)
    if downloadable:  # not while playing: a download built for every step would slow each one
        downloads_panel.downloads(trace)


def intro() -> None:
    """One sentence of what this page is, for a stranger (kvviz's own text)."""
    st.markdown(words.INTRO)


def prompt_line(cfg, where=st) -> None:
    """The prompt Generate will use, shortened to a line or two, as plain text (never Markdown)."""
    where.text(words.prompt_shown(cfg.prompts[0]))


def explainer() -> None:
    """The plain-language panel and glossary, one click away (kvviz's own text from assets/,
    never user text); closed, at the end of the page: right under the tour before a run (on a
    stranger's first screen, below Generate), below the run's panels after one (a hosted run's
    texts and cache map keep the first screen at 1280 x 720)."""
    with st.expander("What am I looking at?", expanded=False):
        st.markdown((assets.FOLDER / "explainer.md").read_text())
        st.markdown((assets.FOLDER / "glossary.md").read_text())
