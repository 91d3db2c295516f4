"""`kvviz shrink` (kvviz.shrink.cli): a run written to a file Replay reads, the page's default prompt,
bad flags refused in one line before any load, and `--sweep` with what it drops and why (tiny models)."""
import argparse

import pytest
from tiny import save_tiny

from kvviz.core.errors import UserError
from kvviz.shrink import cli as shrink_cli
from kvviz.shrink import compute as shrink
from kvviz.shrink import sweep, task, trace
from tests.shrink.test_sweep import short_items


def test_fp8_takes_no_bit_width_or_residual_and_the_others_default_to_4_bits_16_kept():
    flags = lambda quant, nbits=None, residual=None: argparse.Namespace(quant=quant, nbits=nbits, residual=residual)  # noqa: E731
    assert shrink_cli.quant_mode(flags("fp8")) == shrink.ShrinkMode(backend="fp8", nbits=8)
    assert shrink_cli.quant_mode(flags("hqq")) == shrink.ShrinkMode(backend="hqq", nbits=4, residual_length=16)
    assert shrink_cli.quant_mode(flags("quanto", 2, 0)) == shrink.ShrinkMode(backend="quanto", nbits=2, residual_length=0)
    with pytest.raises(UserError, match="--nbits 4 does not apply"):
        shrink_cli.quant_mode(flags("fp8", 4))
    with pytest.raises(UserError, match="drop --residual"):
        shrink_cli.quant_mode(flags("fp8", residual=8))


def test_an_out_path_is_checked_before_any_work(tmp_path):
    shrink_cli.check_out(str(tmp_path / "new.json"))  # a new file in a folder that exists
    with pytest.raises(UserError, match="is a folder"):
        shrink_cli.check_out(str(tmp_path))
    with pytest.raises(UserError, match=r"--report .*: the folder .* does not exist"):
        shrink_cli.check_out(str(tmp_path / "no" / "r.html"), "--report")


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


def test_cli_sweep_writes_rows_answers_and_names_what_it_dropped(tiny_dir, tmp_path, capsys):
    from kvviz import cli
    path, out = tmp_path / "task.json", tmp_path / "sweep.json"
    path.write_text(task.to_json(short_items(), "test"))
    code = cli.main(["shrink", "--sweep", "--task", str(path), "--items", "1", "--model", str(tiny_dir),
                     "--presses", "Knorm,SnapKV", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = sweep.from_json(out.read_bytes())
    presses = {r.mode for r in result.rows if r.kind == "press"}
    assert presses == {f"{p} press, evicting {x * 100:g}%" for p in ("Knorm", "SnapKV") for x in sweep.RATIOS} | {
        f"SnapKV press, evicting {x * 100:g}%, question in the window" for x in sweep.RATIOS}
    assert all(len(r.answers) == 1 for r in result.rows) and len(result.items) == 1
    assert "item 1 of 1" in captured.err and "SnapKV press, evicting 87.5%" in captured.out
    assert "dropped PyramidKV: it keeps a different number of positions in each layer" in captured.out


def test_cli_sweep_on_a_model_it_cannot_shrink_says_why_and_exits_2(tmp_path, capsys):
    from kvviz import cli
    folder = save_tiny(tmp_path / "sliding", "sliding")  # every layer keeps a sliding window
    code = cli.main(["shrink", "--sweep", "--items", "1", "--model", str(folder), "--out", str(tmp_path / "s.json")])
    err = capsys.readouterr().err
    assert code == 2 and "nothing to compare on this model" in err and "Traceback" not in err
    assert "dropped SnapKV: this model's layers 0–1 keep a sliding window" in err
    assert "dropped quanto 4-bit: this model's layers 0–1 keep a sliding window" in err
    assert not (tmp_path / "s.json").exists()
