"""The Shrink page headless (AppTest) on the tiny local Llama: a press and a quantized cache."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.slow  # runs the Shrink page (Streamlit AppTest) with model runs: make test, not make check

PAGE = str(Path(__file__).resolve().parents[2] / "app_pages" / "shrink.py")
PROMPT = "The key value cache keeps the keys and values of every past token. " * 3 + "What is a KV cache?"


@pytest.fixture
def at(tiny_dir, monkeypatch) -> AppTest:
    monkeypatch.setenv("KVVIZ_MODEL", str(tiny_dir))
    for name in ("KVVIZ_PRESENT", "KVVIZ_HOSTED", "KVVIZ_HOSTED_MODELS"):
        monkeypatch.delenv(name, raising=False)
    app = AppTest.from_file(PAGE, default_timeout=120)
    app.run()
    assert not app.exception, app.exception
    app.text_area(key="shrink_prompt").set_value(PROMPT)
    app.slider(key="shrink_new").set_value(6)
    return app


def answers(at) -> list[str]:
    return [c.value for c in at.main.code]


def test_press_run_shows_both_answers_caption_and_kept_map(at):
    at.selectbox(key="shrink_press").set_value("StreamingLLM")
    at.button(key="shrink_run").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)
    full, shrunk = answers(at)
    assert full.strip() and shrunk.strip()
    heading = at.subheader[0].value
    assert heading.startswith("identical") or heading.startswith("diverged at token")
    assert (full == shrunk) == heading.startswith("identical")
    vegas = [c.proto.spec for c in at.main.get("vega_lite_chart")]
    assert len(vegas) == 3 and any("token text" in s and "evicted" in s for s in vegas)


def test_quantized_run_shows_payload_scales_residual(at):
    at.radio(key="shrink_kind").set_value("Quantized cache")
    at.run()
    at.selectbox(key="shrink_backend").set_value("quanto")
    at.run()
    at.selectbox(key="shrink_nbits").set_value(4)
    at.button(key="shrink_run").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)
    assert len(answers(at)) == 2
    assert any("payload" in c.value and "residual" in c.value for c in at.caption)
    assert len(at.main.get("vega_lite_chart")) == 2  # no kept map: nothing evicted


def test_empty_prompt_is_a_plain_message(at):
    at.text_area(key="shrink_prompt").set_value("   ")
    at.button(key="shrink_run").click().run()
    assert not at.exception
    assert any("prompt is empty" in e.value for e in at.error)


def test_changed_settings_mark_the_old_result(at):
    at.selectbox(key="shrink_press").set_value("Knorm")
    at.button(key="shrink_run").click().run()
    assert not at.warning
    shown = {m.label: m.value for m in at.metric}
    assert "KV cache at the end (measured)" in shown
    at.slider(key="shrink_new").set_value(5).run()
    assert any("previous settings" in w.value for w in at.warning)
    assert answers(at)  # the old answers stay, marked


def test_sweep_runs_on_the_page_and_the_shipped_one_shows(at, tmp_path, monkeypatch):
    from tests.shrink.test_sweep import short_items

    from kvviz.shrink import task
    path = tmp_path / "task.json"
    path.write_text(task.to_json(short_items(), "test"))
    monkeypatch.setattr(task, "ASSET", path)  # the tiny model's context is 256 tokens
    at.run()
    at.multiselect(key="shrink_sweep_presses").set_value(["Knorm"])
    at.multiselect(key="shrink_sweep_quant").set_value(["quanto 4-bit"])
    at.number_input(key="shrink_sweep_items").set_value(1)
    at.button(key="shrink_sweep_run").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)
    frames = [d.value for d in at.dataframe]
    table = next(f for f in frames if "kept_share" in f.columns)  # the sweep's table
    assert list(table["mode"]) == ["full cache"] + [f"Knorm press, evicting {r * 100:g}%" for r in (0.25, 0.5, 0.75, 0.875)] \
        + ["quantized cache (quanto 4-bit, residual 16)"]
    assert table["accuracy"].between(0, 1).all() and (table["lo"] <= table["accuracy"]).all() \
        and (table["accuracy"] <= table["hi"]).all()
    assert any("run here just now" in c.value for c in at.caption)
    assert any(c.value.startswith("Protocol: the kvpress leaderboard's") for c in at.caption)
    answers = next(f for f in frames if "full cache's answer" in f.columns)  # each item's answer, plain cells
    assert len(answers) == 1 and list(answers["task"]) == ["custom"]
    assert list(table["measured"]) == ["1"] * 6  # complete: the items behind each row
    at.button(key="shrink_sweep_shipped").click().run()
    assert not at.exception
    assert any("shipped with kvviz" in c.value and "SmolLM2" in c.value for c in at.caption)
    assert any(c.value.startswith("Not in this sweep: PyramidKV") for c in at.caption)
    shipped_partial_is_labelled(at)


def shipped_partial_is_labelled(at) -> None:
    """The shipped sweep as the page shows it agrees with the file: each row's right answers, and
    while the file is partial ("complete": false) the caption, both charts' titles and every row
    of the table say "N of 52 items so far"; once complete, none of them does."""
    import json

    from kvviz.app import ui
    from kvviz.shrink import panel, sweep
    shipped = sweep.from_json(panel.SHIPPED_SWEEP.read_bytes())
    table = next(d.value for d in at.dataframe if "measured" in d.value.columns)
    assert list(table["right"]) == [f"{r.right}/{r.items}" for r in shipped.rows]
    words = f"{len(shipped.items)} of {shipped.items_total} items so far"
    partial = not shipped.complete
    assert any(f"Partial sweep: {words} (every row counts those items" in c.value
               and f"the items so far: {ui.inert(shipped.formats_so_far())}." in c.value for c in at.caption) == partial
    assert (list(table["measured"]) == [words] * len(shipped.rows)) == partial
    titles = [json.loads(c.proto.spec).get("title", {}).get("text") for c in at.main.get("vega_lite_chart")]
    assert titles.count(f"Partial sweep: {words}") == (2 if partial else 0)


def test_hosted_sweep_from_a_crafted_link_is_refused_in_a_sentence(default_lm, monkeypatch):
    """Hosted: a link naming five presses asks 5 × 4 + 4 (SnapKV with the question) + 1 (quantized)
    settings past the full cache, more than the 8 points a visitor may
    sweep; the page says so before any run (default_lm: the model converted before the page loads it)."""
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    monkeypatch.delenv("KVVIZ_MODEL", raising=False)
    app = AppTest.from_file(PAGE, default_timeout=180)
    app.query_params["shrink_sweep_presses"] = ["StreamingLLM", "SnapKV", "Knorm", "ExpectedAttention", "TOVA"]
    app.run()
    assert not app.exception
    assert app.number_input(key="shrink_sweep_items").value == 2  # a visitor's default: two items
    app.button(key="shrink_sweep_run").click().run()
    assert not app.exception and not app.dataframe
    assert any("sweep points is 25; this hosted kvviz allows 8" in e.value for e in app.error)


def test_the_default_is_the_demo_and_its_suggestion_sets_the_sidebar(at):
    """The page opens on shrink.DEMO_MODE; after its run a button offers SnapKV at the same ratio
    and, clicked, sets the sidebar to it (nothing runs); identical answers say why."""
    from kvviz.shrink import compute as shrink
    assert at.selectbox(key="shrink_press").value == shrink.DEMO_MODE.press
    assert at.slider(key="shrink_ratio").value == shrink.DEMO_MODE.ratio
    at.button(key="shrink_run").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)
    identical = at.subheader[0].value.startswith("identical")
    assert any(c.value.startswith("Why identical") for c in at.caption) == identical
    at.button(key="shrink_suggestion").click().run()
    assert at.selectbox(key="shrink_press").value == "SnapKV"
    assert at.slider(key="shrink_ratio").value == shrink.DEMO_MODE.ratio
    assert any("previous settings" in w.value for w in at.warning)
