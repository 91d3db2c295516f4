"""Every page's share link reproduces every setting (headless AppTest, tiny model).

The settings are not a hand-picked list: each page is opened, every keyed widget it shows is found
in the element tree and moved off its default (the next option, one step more, the other side of
a toggle, text appended to a box: a preset's prompt included), through the URL a link would use,
until no new widget appears. The page's share link is then opened in a fresh session, and every
keyed widget must come back with the same value. A new setting that a link does not carry fails
here. Conditional widgets are reached by scenarios that pin a choice (Shrink's press or quantized
cache, the Planner's catalog model with a custom GPU or a pasted config).

Also: a bad or over-the-cap value in a link falls back (or is cut, with a sentence), never a
traceback; and a link never starts a run.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import Widget

from kvviz.core import assets
from kvviz.app import links
from kvviz.vllm import panel as vllm_panels

pytestmark = pytest.mark.slow  # pages through AppTest with a model: make test, not make check

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "app_pages"
APP = str(ROOT / "app.py")
NOT_SETTINGS = {"button", "download_button", "file_uploader", "chat_input"}  # actions, not settings
# Kept as the host has it (compared, not moved): a link naming another model shows a Load button
# and the page waits there (tests/app/test_links_pages.py), so nothing after it would be seen.
KEPT = {"model"}
TINY_CONFIG = json.dumps({"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256,
                          "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 512,
                          "vocab_size": 32000, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"})
EDIT = " (edited: ünïcode & ?=# + %20 <b>)"  # what a link must carry verbatim
ENGINE_URL = "http://127.0.0.1:9"  # nothing listens: the page shows its widgets and a status
# (page file or the app for Live, pinned URL values that pick a branch): the branches a link can be on
SCENARIOS = {
    "live": (APP, {}),
    "sweep": ("sweep.py", {}),
    "shrink-press": ("shrink.py", {"shrink_kind": "Press (evict positions)"}),
    "shrink-quantized": ("shrink.py", {"shrink_kind": "Quantized cache"}),
    "serving": ("serving.py", {}),
    "planner-catalog": ("planner.py", {"plan_source": "Catalog", "plan_model": "Llama-3.2-1B", "plan_gpu": "Custom"}),
    "planner-pasted": ("planner.py", {"plan_source": "Paste config.json", "plan_config": TINY_CONFIG}),
    "replay": ("replay.py", {"replay_source": "smollm2-135m-cpu-fp32"}),
    "engine": ("engine.py", {"engine_urls": ENGINE_URL}),
    "replay-shrink": ("replay.py", {"replay_source": "smollm2-135m-shrink-snapkv"}),
}
CASES = list(SCENARIOS)


@pytest.fixture(autouse=True)
def own_machine(tiny_dir, monkeypatch):
    monkeypatch.setenv("KVVIZ_MODEL", str(tiny_dir))
    for name in ("KVVIZ_PRESENT", "KVVIZ_HOSTED", "KVVIZ_HOSTED_MODELS", "KVVIZ_VLLM_URL"):
        monkeypatch.delenv(name, raising=False)
    yield
    vllm_panels.watch_for(ENGINE_URL).stop()
    vllm_panels.watch_for.clear()


def page_path(page: str) -> str:
    return page if page == APP else str(PAGES / page)


def opened(page: str, pairs: list[tuple[str, str]]) -> AppTest:
    """The page opened from a link holding `pairs` (repeated keys kept), in a fresh session."""
    at = AppTest.from_file(page_path(page), default_timeout=120)
    for key in dict(pairs):
        values = [v for k, v in pairs if k == key]
        at.query_params[key] = values if len(values) > 1 else values[0]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def settings(at: AppTest) -> dict[str, Widget]:
    """Every keyed widget on the page that holds a setting, by key."""
    found, stack = {}, [at._tree]
    while stack:
        node = stack.pop()
        stack.extend(getattr(node, "children", {}).values())
        if isinstance(node, Widget) and node.key and node.type not in NOT_SETTINGS:
            found[node.key] = node
    return found


def param(key: str) -> str:
    """The link parameter of a widget: its key (the Live prompt boxes are keyed per preset)."""
    head = key.split("-", 1)[0]
    return head if head in links.PROMPT_KEYS and "-" in key else key


def number_text(x) -> str:
    return str(int(x)) if isinstance(x, float) and math.isfinite(x) and x == int(x) else str(x)


def formatted(w) -> list[str]:
    fmt = w.format_func if hasattr(w, "format_func") else str
    value = w.value if isinstance(w.value, list) else [w.value]
    return [str(fmt(v)) for v in value]


def moved(w) -> str | list[str] | None:
    """The URL value that moves widget `w` off its current value; None where nothing else exists."""
    kind = w.type
    if kind in ("selectbox", "radio", "select_slider"):
        now = formatted(w)[0] if kind != "select_slider" else formatted(w)[0]
        others = [o for o in w.options if o != now]
        return others[0] if others else None
    if kind == "multiselect":
        now = formatted(w)
        pick = w.options[:2] if w.options[:2] != now else w.options[-2:]
        return pick if pick != now else None
    if kind in ("slider", "number_input"):
        step = w.step or 1
        up = w.value + step
        new = up if w.max is None or up <= w.max else w.value - step
        return number_text(round(new, 9) if isinstance(new, float) else new)
    if kind in ("toggle", "checkbox"):
        return "false" if w.value else "true"
    if kind in ("text_area", "text_input"):  # a long preset edited down to a few words
        text = w.value or ""
        return (text if len(text) < 300 else text[:40]) + EDIT
    raise AssertionError(f"a {kind} widget ({w.key}): teach this test how a link moves it")


def explore(page: str, pinned: dict[str, str]) -> tuple[list[tuple[str, str]], dict]:
    """URL pairs that move every setting of `page` off its default, the pinned ones kept; and the
    defaults of what was moved. Choices first, then (with every choice made) the text boxes."""
    pairs = [(k, v) for k, v in pinned.items()]
    defaults = {}
    for texts in (False, True):
        for _ in range(6):  # until no new widget shows up
            fresh = {k: w for k, w in settings(opened(page, pairs)).items()
                     if param(k) not in dict(pairs) and k not in defaults and k not in KEPT
                     and (w.type in ("text_area", "text_input")) == texts}
            if not fresh:
                break
            for key, w in fresh.items():
                value = moved(w)
                defaults[key] = w.value
                if value is not None:
                    pairs += [(param(key), v) for v in (value if isinstance(value, list) else [value])]
    return pairs, defaults


def share_pairs(at: AppTest) -> tuple[str, list[tuple[str, str]]]:
    link = at.sidebar.code[-1].value
    return link, links.decode(link.split("?", 1)[1] if "?" in link else "")


@pytest.mark.parametrize("scenario", CASES)
def test_every_setting_comes_back_from_the_share_link(scenario):
    page, pinned = SCENARIOS[scenario]
    pairs, defaults = explore(page, pinned)
    first = opened(page, pairs)
    assert not first.error, [e.value for e in first.error]
    shown = settings(first)
    unmoved = [k for k, v in defaults.items() if k in shown and shown[k].value == v and moved(shown[k]) is not None]
    assert not unmoved, f"the URL did not move {unmoved}"  # every value was valid and applied
    link, carried = share_pairs(first)
    again = opened(page, carried)
    back = settings(again)
    lost = {k: (w.value, back[k].value if k in back else "(missing)") for k, w in shown.items()
            if k not in back or back[k].value != w.value}
    assert not lost, f"{scenario}: the link {link} lost {lost}"
    assert share_pairs(again)[0] == link  # the reopened page links to itself


def test_a_preset_prompt_edited_is_carried_and_restored():
    at = opened(APP, [("preset", "Long document")])
    at.text_area(key="prompt-Long document").set_value("Only this.").run()
    link, carried = share_pairs(at)
    assert ("prompt", "Only this.") in carried and not any(k == "system" for k, _ in carried), link
    again = opened(APP, carried)
    assert again.text_area(key="prompt-Long document").value == "Only this."
    assert again.selectbox(key="preset").value == "Long document"
    # another preset chosen after opening the link starts at its own text, not the link's
    again.selectbox(key="preset").set_value("Short question").run()
    presets = json.loads((assets.FOLDER / "prompts.json").read_text())
    assert again.text_area(key="prompt-Short question").value == presets["Short question"]["prompt"]
    assert not any(k == "prompt" for k, _ in share_pairs(again)[1])


def test_an_emptied_system_prompt_is_carried_as_empty():
    at = opened(APP, [("preset", "Chat with a long system prompt")])
    at.text_area(key="system-Chat with a long system prompt").set_value("").run()
    _, carried = share_pairs(at)
    assert ("system", "") in carried
    assert opened(APP, carried).text_area(key="system-Chat with a long system prompt").value == ""


def test_a_text_too_long_for_a_link_is_left_out_and_the_caption_says_so():
    at = opened("shrink.py", [])
    at.text_area(key="shrink_prompt").set_value("z" * (links.MAX_LINK_PROMPT_CHARS + 1)).run()
    link, carried = share_pairs(at)
    assert not any(k == "shrink_prompt" for k, _ in carried), link
    words = " ".join(c.value for c in at.sidebar.caption)
    assert "longer than a link carries" in words and "prompt" in words


@pytest.mark.parametrize("page, pinned, bad", [
    ("sweep.py", {}, {"sweep_peak_gbs": "fast", "sweep_new": "100000", "sweep_prompts": "7"}),
    ("shrink.py", {}, {"shrink_ratio": "7", "shrink_press": "NoSuchPress", "shrink_new": "-3"}),
    ("serving.py", {}, {"srv_blocks": "-5", "srv_block_size": "3", "srv_every": "x"}),
    ("planner.py", {}, {"plan_context": "1e99", "plan_tp": "0", "plan_gpu": "<b>GPU</b>"}),
    ("replay.py", {}, {"replay_speed": "99×", "replay_step": "100000"}),
    ("engine.py", {"engine_urls": ENGINE_URL}, {"engine_every": "3", "engine_live": "maybe"}),
    (APP, {"greedy": "false"}, {"batch": "0", "max_new": "1e9", "preset": "Nope", "temperature": "nan"}),
])
def test_a_bad_value_in_a_link_falls_back_to_the_default(page, pinned, bad):
    plain = settings(opened(page, list(pinned.items())))
    at = opened(page, [*pinned.items(), *bad.items()])
    shown = settings(at)
    for key in bad:
        if key in plain:
            assert shown[key].value == plain[key].value, key
    link, carried = share_pairs(at)
    assert not set(bad) & {k for k, _ in carried}, link


def test_hosted_caps_apply_to_what_a_link_carries(monkeypatch):
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    monkeypatch.setenv("KVVIZ_HOSTED_MODELS", "default")
    from kvviz.app import hosted
    cap = hosted.Policy().max_prompt_chars
    at = opened("serving.py", [("srv_requests", "q" * (cap + 10)), ("srv_max_new", "100000")])
    assert len(at.text_area(key="srv_requests").value) == cap
    assert any("cut to fit" in c.value for c in at.caption)
    assert at.slider(key="srv_max_new").value == 24  # over the cap: the default


def test_a_link_never_starts_a_run():
    at = opened("shrink.py", [("shrink_new", "8"), ("shrink_prompt", "Hello")])
    assert "shrink" not in at.session_state
    assert any("Run full and shrunk" in i.value for i in at.info)
    at = opened("serving.py", [("srv_max_new", "8")])
    assert "serving_result" not in at.session_state
