"""The kvviz-shrink file (kvviz.shrink.trace) and its replay (the Replay page): what is written is
what is read back, the figures are the same in every place that shows them, and a bad file is
refused in one sentence (its HTML report: test_report.py; `kvviz shrink`: test_cli.py)."""
import json
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from kvviz.core import assets
from kvviz.app import ui
from kvviz.core.trace import TraceError
from kvviz.shrink import trace
from kvviz.shrink import compute as shrink
from kvviz.shrink import report as shrink_report
from tests.shrink.conftest import NEW_TOKENS, PIECES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def result(tiny_comparison) -> shrink.Comparison:
    """The session's comparison (tests/shrink/conftest.py), a press and a quantized cache."""
    return tiny_comparison


@pytest.mark.slow
def test_what_is_written_is_read_back(result):
    back = trace.from_json(trace.to_json(result, PIECES, "tiny llama"))
    assert back.prompt_pieces == PIECES and back.model == "tiny llama"
    for mine, theirs in ((result.full, back.result.full), (result.shrunk, back.result.shrunk)):
        assert (theirs.label, theirs.text, theirs.steps, theirs.pieces) == (mine.label, mine.text, mine.steps, mine.pieces)
        assert theirs.kept.keys() == mine.kept.keys()
        assert all(torch.equal(theirs.kept[k], mine.kept[k]) for k in mine.kept)
    assert back.result.diverged_at == result.diverged_at
    assert back.result.caption() == result.caption()
    assert back.result.bytes_ratio() == result.bytes_ratio()


def test_the_divergence_is_recomputed_from_the_tokens_not_copied(result):
    doc = trace.as_record(result, PIECES)
    doc["diverged_at"] = 0 if result.diverged_at is None else None  # a file that lies
    assert trace.from_json(json.dumps(doc)).result.diverged_at == result.diverged_at


def test_the_pieces_add_up_to_the_text(result):
    """A replay's scrubber shows the joined token texts; at the end they are the decoded answer."""
    for run in (result.full, result.shrunk):
        assert len(run.pieces) == len(run.steps) and "".join(run.pieces) == run.text
    half = result.upto(3)
    assert len(half.full.steps) == len(half.shrunk.steps) == 3
    assert half.full.text == "".join(result.full.pieces[:3])
    assert result.upto(NEW_TOKENS).full.text == result.full.text


def bad(doc: dict, change) -> dict:
    doc = json.loads(json.dumps(doc))
    change(doc)
    return doc


@pytest.mark.parametrize("change, words", [
    (lambda d: d.update(format="kvviz-trace"), "kvviz reads 'kvviz-shrink'"),
    (lambda d: d.update(version=9), "version 9"),
    (lambda d: d.update(extra=1), "unknown field"),
    (lambda d: d["full"]["steps"][0].update(kv_bytes=-1), "kv_bytes"),
    (lambda d: d["full"]["steps"][1].update(step=5), "not numbered"),
    (lambda d: d["full"].update(steps=[]), "holds no steps"),
    (lambda d: d["shrunk"].update(kept={"0": [[0, 99_999]]}), "not positions of the 40-token prompt"),
    (lambda d: d["shrunk"].update(kept={"x<b>": [[0]]}), "not a number"),
    (lambda d: d["shrunk"]["pieces"].pop(), "token texts"),
])
def test_a_bad_file_is_one_sentence(result, change, words):
    doc = bad(trace.as_record(result, PIECES), change)
    with pytest.raises(TraceError) as err:
        trace.from_json(json.dumps(doc))
    assert words in str(err.value), str(err.value)


@pytest.mark.parametrize("data", [b"", b"not json", b"[1, 2]", b"{\"format\": \"kvviz-shrink\"}",
                                  b"[" * 100_000, "{\"format\": \"kvviz-shrink\", \"version\": 1e400}".encode()])
def test_garbage_is_refused_in_words(data):
    with pytest.raises(TraceError):
        trace.from_json(data)


def test_only_a_shrink_file_is_taken_for_one():
    assert not trace.is_record(b"{\"format\": \"kvviz-trace\"}") and not trace.is_record(b"[" * 10_000)
    assert trace.is_record(b"{\"format\": \"kvviz-shrink\", \"anything\": 1}")


def fake_svg(vega: dict) -> str:
    return '<svg id="x"><text>chart</text></svg>'


@pytest.mark.slow
def test_replay_page_plays_a_shrink_file(result, tmp_path, monkeypatch):
    path = tmp_path / "shrink.json"
    path.write_bytes(trace.to_json(result, PIECES, "tiny llama"))
    monkeypatch.setattr(ui, "example_traces", lambda: {"shrink": path})
    at = AppTest.from_file(str(ROOT / "app_pages" / "replay.py"), default_timeout=120).run()
    assert not at.exception and not at.error, (at.exception, at.error)
    assert at.subheader[0].value == ui.inert(result.caption())
    assert [c.value for c in at.main.code] == list(result.first_difference_marked())  # ⟦the first difference⟧
    assert any(f"bytes {result.bytes_ratio():.2f}" in c.value for c in at.caption)
    at.slider(key="replay_shrink_step").set_value(2).run()
    assert [c.value for c in at.main.code] == list(result.upto(2).first_difference_marked())
    at.select_slider(key="replay_shrink_speed").set_value("instant").run()
    at.button(key="replay_shrink_play").click().run()
    assert not at.exception
    assert [c.value for c in at.main.code] == list(result.first_difference_marked())


@pytest.mark.slow
def test_replay_page_refuses_a_bad_shrink_file_in_words(result, tmp_path, monkeypatch):
    path = tmp_path / "shrink.json"
    path.write_text(json.dumps(bad(trace.as_record(result, PIECES), lambda d: d["full"]["steps"][1].update(step=5))))
    monkeypatch.setattr(ui, "example_traces", lambda: {"shrink": path})
    at = AppTest.from_file(str(ROOT / "app_pages" / "replay.py"), default_timeout=120).run()
    assert not at.exception
    assert any("not numbered" in e.value for e in at.error)


def test_the_shipped_example_replays_and_reports():
    """assets/traces/*shrink*.json: real runs of the default model (`kvviz shrink`), read
    back, their figures computed again, their report drawn."""
    shipped = [p for p in assets.TRACES.glob("*.json") if trace.is_record(p.read_bytes())]
    assert shipped
    for path in shipped:
        rec = trace.from_json(path.read_bytes())
        assert rec.model and rec.result.shrunk.kept and len(rec.prompt_pieces) > 40
        assert 0 < rec.result.bytes_ratio() < 1
        assert rec.result.caption() in shrink_report.html_report(rec.result, rec.prompt_pieces, rec.model, svg=fake_svg)


def test_shipped_snapkv_example_runs_the_default_prompt_and_its_scores_choose():
    """The shipped SnapKV example is the Shrink page's default prompt, and SnapKV kept positions
    other than the most recent ones in some layer (its window is shorter than the half it keeps)."""
    rec = trace.from_json((assets.TRACES / "smollm2-135m-shrink-snapkv.json").read_bytes())
    assert shrink.DEFAULT_PROMPT in "".join(rec.prompt_pieces)
    n = len(rec.prompt_pieces)
    heads = [sorted(head) for positions in rec.result.shrunk.kept.values() for head in positions.tolist()]
    assert heads and any(head != list(range(n - len(head), n)) for head in heads)


