"""Streamlit plumbing every page shares: Markdown-inert text and visitor-safe errors, process-wide
settings, the cached model with its Load button and device queue, the model box, presenter-mode
style, share links, text boxes filled from a link, example traces, speeds and upload caps.

A page's own widgets live in its feature's `panel.py` (or `<part>_panel.py`): the Live page's
sidebar in kvviz/live/settings_panel.py, the Replay page's in kvviz/replay/panel.py.
"""
from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

import streamlit as st

from kvviz.core import assets, errors
from kvviz.app import collector, hosted, keys, links, restart, threads, uploads
from kvviz.engine import models
from kvviz.app.device_queue import DeviceQueue
from kvviz.app.model_store import ModelStore
from kvviz.app.stage import presenter_mode
from kvviz.core.config import DEFAULT_MODEL, LoadConfig
from kvviz.core.trace import MAX_TRACE_BYTES, Trace

MAX_PROMPT_CHARS = 200_000  # the prompt boxes' cap on your own machine (hosted: kvviz.app.hosted)
MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")
# GitHub-flavoured Markdown links bare URLs, "www." names and e-mail addresses whatever is escaped:
# a word joiner (U+2060, invisible) after the scheme's colon, after "www" and before "@" stops it.
AUTOLINKS = ((re.compile(r"(\\:)(?=//)"), "\\1\u2060"), (re.compile(r"(?i)\b(www)(?=\\\.)"), "\\1\u2060"),
             (re.compile("@"), "\u2060@"))


def inert(text: str) -> str:
    """`text` with every Markdown-significant character escaped and no bare URL or address made a
    link, for alerts and captions that render Markdown.

    Error messages can quote what a user typed, a URL carried or an uploaded file held.
    """
    text = MARKDOWN_SPECIALS.sub(r"\\\1", str(text))
    for pattern, joined in AUTOLINKS:
        text = pattern.sub(joined, text)
    return text


def visitor_text(exc: BaseException, context: str = "") -> str:
    """`exc` as a visitor may read it, Markdown-inert: a UserError's own sentence; any other
    error's details only on your own machine (hosted: one generic sentence, details logged)."""
    return inert(errors.visitor_message(exc, policy().enabled, context))


def configure_server() -> None:
    """Process-wide settings, applied by app.py on every script run (idempotent, cheap).

    torch's thread policy (kvviz.app.threads: all cores but one, `KVVIZ_TORCH_THREADS` overrides)
    and the interpreter's switch interval (the model's thread waits less for the drawing's), what
    the server imported frozen out of the garbage collector's full passes (kvviz.app.collector),
    and in hosted mode no error details for visitors: an uncaught exception shows a generic
    message, its type, text and traceback go only to the server log; Streamlit's upload endpoint
    bounded (kvviz.app.uploads) for a server not started by kvviz.app.launch; conversion folders a
    killed process left, removed.
    """
    threads.apply_switch_interval()
    collector.freeze_long_lived("imports")  # the modules imported so far: no full collection reads them again
    try:
        threads.apply_torch_threads()
    except errors.UserError as exc:
        st.warning(f"Ignoring a setting: {visitor_text(exc, 'url settings')}")
    if policy().enabled and st.get_option("client.showErrorDetails") != "none":
        st.set_option("client.showErrorDetails", "none")
    uploads.apply(policy())  # hosted: the upload endpoint's size from the policy, held files bounded
    stale_conversions_removed()


@st.cache_resource(show_spinner=False)
def stale_conversions_removed() -> tuple[str, ...]:
    """Once per server process, at its first page: the `.convert-*` folders a killed conversion left
    beside the converted default model (kvviz.engine.models.remove_stale_work), removed."""
    parent = models.default_model_dir().parent
    return tuple(p.name for p in models.remove_stale_work(parent)) if parent.is_dir() else ()


PRESENTER_FONT_SCALE = 1.5  # chart text in presenter mode, × Streamlit's sizes (charts.with_font_scale)


def chart_font_scale() -> float:
    """How much larger chart text is drawn on this page: 1.5 in presenter mode, else 1."""
    return PRESENTER_FONT_SCALE if presenter_mode() else 1.0


def prompt_presets() -> dict:
    return json.loads((assets.FOLDER / "prompts.json").read_text())


@st.cache_resource(show_spinner=False)
def model_store() -> ModelStore:
    """One per server process: the loaded model and its attention variants, shared by every session
    (kvviz.app.model_store)."""
    return ModelStore(family=attention_family)


def attention_family(load_config: LoadConfig):
    """The model whatever its attention implementation: variants share one set of weights."""
    return replace(load_config, attn_implementation="sdpa") if isinstance(load_config, LoadConfig) else load_config


def host_default_model() -> str:
    """The model a page may load without being asked: the host's choice, never a link's."""
    rules = policy()
    if rules.enabled:
        return next(iter(rules.models))
    return os.environ.get("KVVIZ_MODEL", "").strip() or DEFAULT_MODEL


def load_model_with_progress(load_config: LoadConfig) -> models.LoadedModel | None:
    """The page's model if loaded; else loaded now if it is the host's default or the visitor
    clicks Load; else None, with the Load button or a message.

    Opening a shared link never downloads or loads a model by itself: a link naming another
    model shows a button. In hosted mode the load waits its turn in the device queue.
    """
    store = model_store()
    lm = store.get(load_config)
    if lm is not None:
        return lm
    try:
        policy().check_model(load_config.name)
    except errors.UserError as exc:
        st.error(f"Cannot load this model: {visitor_text(exc, 'model settings')}")
        return None
    if load_config.name != host_default_model() and store.sibling(load_config) is None and not ask_to_load(load_config.name):
        return None
    return load_in_turn(store, load_config)


def ask_to_load(name: str) -> bool:
    """A button to load a model that a link or the sidebar named; True when clicked."""
    clicked = st.button(f"Load {inert(name)}", key="load_model", type="primary")
    if not clicked:
        st.info(f"{inert(name)} is not loaded. Loading it may download its weights; press "
                "**Load** to go ahead.")
    return clicked


def load_in_turn(store: ModelStore, load_config: LoadConfig) -> models.LoadedModel | None:
    """Load `load_config` into the store (in hosted mode while holding the device queue); None on error."""
    status = st.empty()
    try:
        with device_turn(status) if policy().enabled else nullcontext():
            lm = store.load(load_config, lambda: load_or_derive(store, load_config))
        collector.freeze_long_lived("model")  # what the load imported: no full collection reads it again
        return lm
    except models.ModelLoadError as exc:
        st.error(model_load_failure(load_config.name, exc))
    return None


def model_load_failure(name: str, exc: models.ModelLoadError) -> str:
    """The sentence for a model that did not load: kvviz's own words (which may quote a library's
    first line or a server path) only on your own machine; hosted, the name and the log."""
    if not policy().enabled:
        return f"Could not load the model: {inert(exc)}"
    errors.log.warning("model load: %s", exc)
    return f"Could not load the model {inert(name)}; the details are in the server's log."


def load_or_derive(store: ModelStore, load_config: LoadConfig) -> models.LoadedModel:
    """`load_config` built from a loaded variant of the same model when there is one (its weights shared,
    a fraction of a second), else loaded. A model that already fell back to eager is its own variant."""
    sibling = store.sibling(load_config)
    if sibling is None:
        return load_with_progress(load_config)
    return sibling if sibling.attn_fallback else models.with_attention(sibling, load_config.attn_implementation)


def load_with_progress(load_config: LoadConfig) -> models.LoadedModel:
    """Load and warm up `load_config`, converting the embedded default first (with a progress bar)."""
    if load_config.name == DEFAULT_MODEL and not models.is_complete(models.default_model_dir()):
        bar = st.progress(0.0, text="Preparing the embedded default model (first run only)")
        with conversion_lock():  # sessions opened together convert once
            models.convert_default_model(lambda msg, frac: bar.progress(frac, text=msg))
        bar.empty()
    with st.spinner("Loading the model…"):
        return models.load_model(load_config)


@st.cache_resource(show_spinner=False)
def conversion_lock() -> threading.Lock:
    return threading.Lock()


def policy() -> hosted.Policy:
    return hosted.policy_from_env()


@st.cache_resource(show_spinner=False)
def device_queue() -> DeviceQueue:
    """One queue per server process: one generation on the device at a time, across sessions."""
    return DeviceQueue()


@contextmanager
def device_turn(status):
    """Wait for the device in line, showing the position (Stop cancels the wait), then hold it."""
    queue, ticket = device_queue(), object()
    queue.join(ticket)
    try:
        while not queue.try_take(ticket):
            status.info(f"Another session is generating on this device. You are number "
                        f"{queue.position(ticket)} in line; press Stop to leave the line.")
            time.sleep(0.25)
        status.empty()
        yield
    finally:
        queue.release(ticket)


def model_settings() -> LoadConfig:
    st.sidebar.subheader("Model")
    rules = policy()
    if rules.enabled:  # an allowlist at pinned revisions; device and dtype chosen by the host
        name = st.sidebar.selectbox("Model", list(rules.models), key="model", bind="query-params")
        return LoadConfig(name=name, revision=rules.models[name])
    name = st.sidebar.text_input("Model", value=os.environ.get("KVVIZ_MODEL", DEFAULT_MODEL),
                                 help="'default' is the embedded SmolLM2-135M-Instruct; or a Hub id "
                                      "or a local folder", key="model", bind="query-params")
    device = st.sidebar.selectbox("Device", ["auto", "cpu", "cuda", "mps"], key="device",
                                  bind="query-params")
    dtype = st.sidebar.selectbox("Dtype", ["auto", "float32", "bfloat16", "float16"], key="dtype",
                                 help="auto: bf16 on CUDA, fp32 elsewhere", bind="query-params")
    return LoadConfig(name=name.strip() or DEFAULT_MODEL, device=device, dtype=dtype)


PAGE_CSS = """<style>
[data-testid="stMainBlockContainer"] { padding-top: 3.5rem; }
h1 { font-size: 2.25rem !important; padding-top: 0.5rem !important; }
[data-testid="stMetric"] .stMarkdownEllipsis, [data-testid="stMetric"] .stMarkdownEllipsis p,
[data-testid="stSidebarNav"] span, [data-testid="stPageLink"] p {
  white-space: normal; overflow: visible; text-overflow: clip; }
[data-testid="stHorizontalBlock"]:has(> [data-testid="stColumn"] > [data-testid="stVerticalBlock"]
  > [data-testid="stElementContainer"] > [data-testid="stMetric"]) { flex-wrap: wrap; row-gap: 0.75rem; }
[data-testid="stHorizontalBlock"]:has(> [data-testid="stColumn"] > [data-testid="stVerticalBlock"]
  > [data-testid="stElementContainer"] > [data-testid="stMetric"]) > [data-testid="stColumn"] { min-width: 7.5rem; }
[data-testid="stLayoutWrapper"]:has(> .st-key-chart-preload) { display: none; }
</style>"""  # every mode: the page starts under the header's 3.75 rem, not 6 rem down (the Live page's
# Generate, texts and map must fit a 1280 x 720 screen); metric labels and values, and sidebar
# links, wrap instead of being cut;
# a row of metrics too narrow for its figures (8 headline figures beside the sidebar at 1280 px)
# wraps onto a second line rather than breaking words mid-letter (a row whose columns hold the metrics
# themselves: matched on any descendant, the rule kept the vLLM watch's two columns side by side on a
# phone, its min-width beating Streamlit's stacking); the hidden chart preload's wrapper
# takes no gap (kvviz.live.panel.preload_charts hides the container itself)

PRESENTER_CSS = """<style>
html { font-size: clamp(16px, 1.1vw, 22px); }
[data-testid="stMainBlockContainer"] { padding-top: 1.25rem; padding-bottom: 2rem; }
[data-testid="stHeader"] { background: transparent; }
h1 { font-size: 2rem !important; padding: 0 0 0.25rem 0 !important; }
[data-testid="stMarkdownContainer"] p { font-size: 1.05rem; }
[data-testid="stCaptionContainer"], [data-testid="stCaptionContainer"] p {
  font-size: 0.95rem !important; color: #2E3A46 !important; }
[data-testid="stMetricLabel"] p { font-size: 0.9rem !important; }
[data-testid="stMetricValue"], [data-testid="stMetricValue"] * {
  font-size: clamp(1.4rem, 1.8vw, 2.4rem) !important; line-height: 1.15 !important; }
[data-testid="stCode"] code { font-size: 1.05rem; }
</style>"""  # rem follows the root size, so the whole page scales with the screen: 16 px at 1280, 21 at 1920


def presenter_style(page_title: str = "") -> None:
    """Wrapping labels always; large type for a projector in presenter mode; a tab open across a
    server restart reloads (kvviz.app.restart); the page's keys listed when "?" is pressed
    (kvviz.app.keys). Fixed stylesheets and scripts: no user text ever goes through them."""
    st.html(PAGE_CSS + (PRESENTER_CSS if presenter_mode() else "") + restart.RELOAD_SCRIPT
            + keys.help_overlay(page_title), unsafe_allow_javascript=True)


# What several features share, so it stays here (a feature never imports another): the speeds of
# the Replay page's three replays (a trace: kvviz.replay; a Shrink comparison; a vLLM watch), the
# shipped example traces (the Live tour reads one too), and every upload box's caps.
SPEEDS = {"¼×": 0.25, "½×": 0.5, "1×": 1.0, "2×": 2.0, "4×": 4.0, "instant": 0.0}


def example_traces() -> dict[str, Path]:
    """The example traces shipped in assets/traces, by display name."""
    return {p.stem: p for p in sorted(assets.TRACES.glob("*.json"))}


def upload_limit_bytes() -> int:
    return policy().upload_limit_bytes(MAX_TRACE_BYTES)


SERVER_MAX_UPLOAD_MIB = hosted.UNHOSTED_UPLOAD_MIB  # .streamlit/config.toml; hosted: Policy.server_upload_mib


def uploader_limit_mb(cap_bytes: int, server_mib: int | None = None) -> int:
    """Streamlit's per-box limit (in its 'MB') for a kvviz cap of `cap_bytes`: above the cap however
    the browser counts a MB (10^6 bytes, or 2^20 on Windows), so kvviz's own check answers first;
    below the server's limit (`server_mib`, default the policy's) less its multipart margin, so the
    server never answers 413."""
    server_mib = policy().server_upload_mib() if server_mib is None else server_mib
    return min(math.ceil(cap_bytes / 1e6) + 1, server_mib - 2)


@st.cache_data(max_entries=8, show_spinner=False)
def cached_example(path: str) -> Trace:
    return Trace.load(path)


def text_from_link(key: str, default: str, chars: int) -> str:
    """A text box's first text: what this page's link carried as `key` (cut to the box's `chars`,
    said so), else `default`."""
    texts, cut = links.linked_texts(st.query_params, {key: default}, chars)
    if cut:
        st.caption(f"This link's text for the box below is longer than the {chars:,} characters "
                   "it takes here: cut to fit.")
    return texts[key]


def share_link(texts: list[links.Text] = (), notes: list[str] = (), settings: str = "these settings"):
    """The page's URL with its bound settings (every value of a multiselect) and its text boxes
    (`texts`, carried where they differ from their defaults: kvviz.app.links), in a code box (which
    has a copy button), under a caption naming only what this page has (`settings`, the boxes by
    name, `notes`: what a link cannot carry).

    Returns a function that draws it again in the same place: a page whose widgets come after the
    link calls it once they are all drawn (a link's value a widget refused leaves the URL only
    when that widget is drawn)."""
    slot = st.sidebar.empty()

    def draw() -> None:
        url = links.share_url(st.context.url or "", st.query_params, links.text_pairs(list(texts)))
        with slot.container():
            st.caption(links.caption(settings, list(texts), list(notes)))
            st.code(url, language=None)

    draw()
    return draw
