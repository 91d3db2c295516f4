"""`kvviz record` end to end on a tiny local model, its bad-input paths, and its flags derived from
the run settings."""
import argparse
import dataclasses
import typing

import pytest

from kvviz import cli
from kvviz.core.config import LoadConfig, RunConfig
from kvviz.core.trace import Trace


@pytest.mark.slow
def test_record_writes_a_trace_and_prints_a_summary(tiny_dir, tmp_path, capsys):
    out = tmp_path / "run.json"
    rc = cli.main(["record", "--model", str(tiny_dir), "--prompt", "What is a KV cache?",
                   "--max-new-tokens", "6", "--batch", "2", "--recompute", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "time to first token" in text and "slower than cached" in text
    trace = Trace.load(out)
    assert trace.meta.batch == 2 and trace.meta.model == str(tiny_dir)
    cached, recompute = trace.events_of("cached"), trace.events_of("recompute")
    assert len(cached) == len(recompute) == 6
    assert [e.token_ids for e in cached] == [e.token_ids for e in recompute]


@pytest.mark.slow
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


@pytest.mark.slow
def test_record_unwritable_output_is_reported(tiny_dir, capsys):
    rc = cli.main(["record", "--model", str(tiny_dir), "--prompt", "hi", "--max-new-tokens", "2",
                   "--out", "/proc/no-such-dir/run.json"])
    assert rc == 2 and "cannot write" in capsys.readouterr().err


def record_args(*flags: str):
    return cli.build_parser().parse_args(["record", "--out", "x.json", *flags])


def test_record_flags_default_to_the_run_settings():
    args = record_args()
    assert cli.values_of(args, RunConfig, args.run_fields) == RunConfig()
    assert cli.values_of(args, LoadConfig, args.model_fields) == LoadConfig()
    every = {f.name for cls in (RunConfig, LoadConfig) for f in dataclasses.fields(cls)} - cli.NOT_FLAGS
    assert set(args.run_fields) | set(args.model_fields) == every
    assert set(cli.FLAG_NAMES) <= every  # a renamed field would leave its flag name behind


def test_record_keeps_its_flag_names_and_maps_them_to_fields():
    args = record_args("--prompt", "a", "--prompt", "b", "--batch", "2", "--cache", "static",
                       "--no-chat-template", "--top-k", "5", "--top-p", "0.5", "--temperature", "0.7",
                       "--seed", "3", "--block-size", "32", "--max-new-tokens", "9", "--system", "s",
                       "--model", "m", "--device", "cpu", "--dtype", "float32", "--no-stop-on-eos")
    assert cli.values_of(args, RunConfig, args.run_fields) == RunConfig(
        prompts=("a", "b"), batch=2, cache_backend="static", chat_template=False, top_k=5, top_p=0.5,
        temperature=0.7, seed=3, block_size=32, max_new_tokens=9, system="s", stop_on_eos=False)
    assert cli.values_of(args, LoadConfig, args.model_fields) == LoadConfig("m", "cpu", "float32")
    assert record_args("--cache-backend", "static").cache_backend == "static"


def test_record_help_is_each_fields_comment_and_choices_its_literal(capsys):
    with pytest.raises(SystemExit):
        record_args("--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "keep the k most likely tokens when sampling (0: off) (default: 0)" in text
    assert "--cache {dynamic,static}, --cache-backend {dynamic,static}" in text
    with pytest.raises(SystemExit):
        record_args("--cache", "paged")
    assert "invalid choice: 'paged'" in capsys.readouterr().err


def test_a_new_setting_gets_a_flag_without_editing_the_cli():
    @dataclasses.dataclass(frozen=True)
    class Settings:
        window: int | None = None  # keep this many tokens (none: all)
        mode: typing.Literal["a", "b"] = "a"  # which mode
        verbose: bool = False  # say more

    parser = argparse.ArgumentParser()
    names = cli.config_flags(parser, Settings)
    args = parser.parse_args(["--window", "8", "--mode", "b", "--verbose"])
    assert names == ["window", "mode", "verbose"]
    assert cli.values_of(args, Settings, names) == Settings(8, "b", True)
    assert "keep this many tokens (none: all) (default: None)" in " ".join(parser.format_help().split())


def test_a_setting_no_flag_can_carry_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Settings:
        table: dict[str, int] = dataclasses.field(default_factory=dict)  # no flag

    with pytest.raises(TypeError, match="no command-line flag"):
        cli.config_flags(argparse.ArgumentParser(), Settings)
