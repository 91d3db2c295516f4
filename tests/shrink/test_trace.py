"""The kvviz-shrink file (kvviz.shrink.trace), its HTML report (kvviz.shrink.report) and its
replay (the Replay page): what is written is what is read back, the figures are the same in every
place that shows them, and a bad or hostile file is refused in one sentence or shown inert."""
import json
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest
from tiny import tiny_lm

from kvviz.app import ui
from kvviz.core.trace import TraceError
from kvviz.shrink import trace
from kvviz.shrink import compute as shrink
from kvviz.shrink import report as shrink_report

ROOT = Path(__file__).resolve().parents[2]
PROMPT_TOKENS, NEW_TOKENS = 40, 6
PIECES = [f"t{i}" for i in range(PROMPT_TOKENS)]


@pytest.fixture(scope="module", params=[shrink.ShrinkMode(press="StreamingLLM", ratio=0.5),
                                        shrink.ShrinkMode(backend="quanto", nbits=4, residual_length=4)],
                ids=["press", "quantized"])
def result(request) -> shrink.Comparison:
    ids = torch.randint(2, 300, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(0))
    return shrink.compare(tiny_lm("llama"), ids, NEW_TOKENS, request.param)


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


def fake_svg(spec: dict) -> str:
    return '<svg id="x"><text>chart</text></svg>'


def test_report_shows_the_figures_the_page_shows(result):
    html = shrink_report.html_report(result, PIECES, "tiny llama", svg=fake_svg)
    assert result.caption() in html
    assert f"{result.bytes_ratio():.2f}" in html and f"{result.step_time_ratio():.2f}" in html
    assert f"{result.shrunk.steps[-1].kv_bytes:,} B" in html and f"{result.full.steps[-1].kv_bytes:,} B" in html
    assert html.count("<svg") == (3 if result.shrunk.kept else 2)
    assert "<script" not in html and 'content="default-src &#39;none&#39;' in html
    if result.shrunk.steps[-1].payload_bytes:
        assert f"{result.shrunk.steps[-1].scale_bytes:,} B" in html


def test_report_keeps_hostile_text_inert(result):
    doc = trace.as_record(result, ["<script>alert(1)</script>"] + PIECES[1:])
    doc["full"]["text"] = "<img src=x onerror=alert(2)>"
    doc["shrunk"]["label"] = "<b>bold</b>"
    back = trace.from_json(json.dumps(doc))
    html = shrink_report.html_report(back.result, back.prompt_pieces, "<i>m</i>", svg=fake_svg)
    for raw in ("<script>alert", "<img src=x", "<b>bold", "<i>m"):
        assert raw not in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html


def test_report_without_a_renderer_still_has_every_figure(result):
    html = shrink_report.html_report(result, PIECES, svg=lambda spec: (_ for _ in ()).throw(RuntimeError()))
    assert "could not be drawn (RuntimeError)" in html and result.caption() in html


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
    """kvviz/assets/traces/*shrink*.json: real runs of the default model (`kvviz shrink`), read
    back, their figures computed again, their report drawn."""
    shipped = [p for p in (ROOT / "kvviz" / "assets" / "traces").glob("*.json") if trace.is_record(p.read_bytes())]
    assert shipped
    for path in shipped:
        rec = trace.from_json(path.read_bytes())
        assert rec.model and rec.result.shrunk.kept and len(rec.prompt_pieces) > 40
        assert 0 < rec.result.bytes_ratio() < 1
        assert rec.result.caption() in shrink_report.html_report(rec.result, rec.prompt_pieces, rec.model, svg=fake_svg)


def test_shipped_snapkv_example_runs_the_default_prompt_and_its_scores_choose():
    """The shipped SnapKV example is the Shrink page's default prompt, and SnapKV kept positions
    other than the most recent ones in some layer (its window is shorter than the half it keeps)."""
    rec = trace.from_json((ROOT / "kvviz" / "assets" / "traces" / "smollm2-135m-shrink-snapkv.json").read_bytes())
    assert shrink.DEFAULT_PROMPT in "".join(rec.prompt_pieces)
    n = len(rec.prompt_pieces)
    heads = [sorted(head) for positions in rec.result.shrunk.kept.values() for head in positions.tolist()]
    assert heads and any(head != list(range(n - len(head), n)) for head in heads)


@pytest.mark.slow
def test_cli_default_prompt_is_the_pages(tiny_dir, tmp_path, capsys):
    from kvviz import cli
    from tiny import tiny_tokenizer
    out = tmp_path / "s.json"
    code = cli.main(["shrink", "--press", "Knorm", "--model", str(tiny_dir), "--max-new-tokens", "2",
                     "--out", str(out)])
    # the page's prompt is longer than the tiny model's 256 positions: refused, naming its length
    n = shrink.prompt_ids(tiny_tokenizer(), shrink.DEFAULT_PROMPT).shape[1]
    assert code == 2 and n > 256 and not out.exists()
    assert f"prompt ({n} tokens) + new tokens (2) = {n + 2} exceeds this model's context of 256" in capsys.readouterr().err
    assert shrink.DEFAULT_PROMPT.endswith("in which year did the lighthouse get an electric lamp?")


@pytest.mark.slow
def test_cli_writes_a_file_replay_reads(tiny_dir, tmp_path, capsys):
    from kvviz import cli
    out, html = tmp_path / "s.json", tmp_path / "s.html"
    code = cli.main(["shrink", "--press", "Knorm", "--ratio", "0.25", "--model", str(tiny_dir), "--prompt",
                     "the keys and values of every past token " * 4, "--max-new-tokens", "5",
                     "--out", str(out), "--report", str(html)])
    assert code == 0, capsys.readouterr().err
    rec = trace.from_json(out.read_bytes())
    printed = capsys.readouterr().out
    assert rec.result.caption() in printed and f"× {rec.result.bytes_ratio():.2f}" in printed
    assert len(rec.result.full.steps) == 5 and rec.result.caption() in html.read_text()


@pytest.mark.parametrize("argv, words", [
    (["--press", "Knorm", "--ratio", "1.5"], "compression ratio is 1.5"),
    (["--quant", "quanto", "--nbits", "3"], "not 3"),
    (["--press", "Knorm", "--max-new-tokens", "0"], "at least 1"),
    (["--press", "Knorm", "--prompt", "  "], "prompt is empty"),
    (["--quant", "fp8", "--nbits", "4"], "fp8 stores 8 bits per value; --nbits 4 does not apply"),
    (["--quant", "fp8", "--residual", "8"], "keeps no full-precision residual"),
    (["--press", "Knorm", "--out", "/nonexistent-kvviz/s.json"], "the folder /nonexistent-kvviz does not exist"),
    (["--press", "Knorm", "--out", "/tmp"], "--out /tmp is a folder"),
    (["--press", "Knorm", "--report", "/nonexistent-kvviz/r.html"], "--report /nonexistent-kvviz/r.html"),
])
def test_cli_bad_input_is_one_line(tiny_dir, tmp_path, capsys, argv, words):
    from kvviz import cli
    args = ["shrink", "--model", str(tiny_dir), "--out", str(tmp_path / "s.json")] + argv
    if "--prompt" not in argv:
        args += ["--prompt", "the keys and values of every past token " * 4]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvviz shrink: error:") and words in err and err.count("\n") == 1  # before any load
    assert not (tmp_path / "s.json").exists()
