"""`kvviz record` end to end on a tiny local model, and its bad-input paths."""
import pytest

from kvviz import cli
from kvviz.live.trace import Trace


def test_record_writes_a_trace_and_prints_a_summary(tiny_dir, tmp_path, capsys):
    out = tmp_path / "run.json"
    rc = cli.main(["record", "--model", str(tiny_dir), "--prompt", "What is a KV cache?",
                   "--max-new-tokens", "6", "--batch", "2", "--recompute", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "time to first token" in text and "slower than cached" in text
    trace = Trace.load(out)
    assert trace.meta["batch"] == 2 and trace.meta["model"] == str(tiny_dir)
    cached, recompute = trace.events_of("cached"), trace.events_of("recompute")
    assert len(cached) == len(recompute) == 6
    assert [e.token_ids for e in cached] == [e.token_ids for e in recompute]


@pytest.mark.parametrize("args, message", [
    (["--prompt", ""], "prompt is empty"),
    (["--prompt", "word " * 400, "--no-chat-template"], "exceeds this model's context"),
    (["--prompt", "hi", "--max-new-tokens", "0"], "at least 1"),
    (["--prompt", "hi", "--max-new-tokens", "300"], "exceeds this model's context"),
])
def test_record_bad_input_exits_2_with_a_message(tiny_dir, tmp_path, capsys, args, message):
    rc = cli.main(["record", "--model", str(tiny_dir), "--out", str(tmp_path / "x.json"), *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "x.json").exists()


def test_record_unknown_model_is_named(tmp_path, capsys):
    rc = cli.main(["record", "--model", "no-such-org/no-such-model", "--prompt", "hi",
                   "--out", str(tmp_path / "x.json")])
    assert rc == 2 and "no-such-org/no-such-model" in capsys.readouterr().err


def test_record_unwritable_output_is_reported(tiny_dir, capsys):
    rc = cli.main(["record", "--model", str(tiny_dir), "--prompt", "hi", "--max-new-tokens", "2",
                   "--out", "/proc/no-such-dir/run.json"])
    assert rc == 2 and "cannot write" in capsys.readouterr().err
