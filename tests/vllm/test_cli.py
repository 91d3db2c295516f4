"""`kvviz watch URL… --out watch.json` (kvviz.vllm.cli): its arguments, a file that replays to the
same rows it writes, and every failure said on stderr with exit status 2 (a fake vLLM serving the
captured payloads: tests/vllm_fake.py)."""
import argparse
import json

import pytest

import kvviz.cli
from kvviz.vllm import cli
from kvviz.vllm.state import apply_batch, request_rows
from kvviz.vllm.trace import Recording, states_at
from kvviz.vllm.watch import EngineWatch
from vllm_fake import free_port
from vllm_payloads import messages, replayed_pool


def test_the_watch_command_s_arguments():
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["watch", "http://a:1", "http://b:2", "--out", "w.json"])
    assert (args.urls, args.out, args.seconds, args.scrape_every) == (["http://a:1", "http://b:2"], "w.json", 30.0, 1.0)
    assert args.request_log is None and args.requests_json is None and args.func is cli.run_watch
    with pytest.raises(SystemExit):
        parser.parse_args(["watch", "http://a:1"])  # --out is required


def test_the_request_rows_are_written_or_the_failure_said(tmp_path, capsys):
    watch = EngineWatch(["http://127.0.0.1:8000"])  # never started: its states are fed here
    for m in messages():
        apply_batch(watch.states, "http://127.0.0.1:8000", 0, m.seq, m.batch)
    path = tmp_path / "rows.json"
    assert cli.write_requests(watch, str(path)) == 0
    assert json.loads(path.read_text()) == request_rows(watch.states) and len(request_rows(watch.states)) == 26
    assert f"26 requests written to {path}" in capsys.readouterr().out
    assert cli.write_requests(watch, str(tmp_path / "missing" / "rows.json")) == 2
    assert "kvviz watch: error: cannot write" in capsys.readouterr().err


@pytest.mark.slow
def test_kvviz_watch_records_a_file_that_replays(fake, tmp_path, capsys):
    fake.publish_captured()
    out, rows_path = tmp_path / "watch.json", tmp_path / "requests.json"
    assert kvviz.cli.main(["watch", fake.url, "--seconds", "3", "--scrape-every", "0.5", "--out", str(out),
                     "--requests-json", str(rows_path)]) == 0
    printed = capsys.readouterr().out
    assert "evicted 104" in printed and "hit rate" in printed and str(out) in printed
    assert f"26 requests written to {rows_path}" in printed
    rec = Recording.load(out)
    assert rec.meta["servers"][fake.url]["version"] == "0.32.0" and rec.scrapes
    (state,) = states_at(rec).values()
    assert state.pool.counts == replayed_pool().counts
    assert json.loads(out.read_text())["format"] == "kvviz-vllm-watch"
    rows = json.loads(rows_path.read_text())  # the rows Replay derives from the file, the same
    assert rows == request_rows(states_at(rec)) and sum(r["cached_tokens"] for r in rows) == 3840
    assert {"prompt_tokens", "cached_tokens", "reused_blocks", "stored_blocks", "miss_reason"} <= set(rows[0])


@pytest.mark.slow
def test_kvviz_watch_on_nothing_says_so_and_fails(tmp_path, capsys):
    url = f"http://127.0.0.1:{free_port()}"
    assert kvviz.cli.main(["watch", url, "--seconds", "1", "--out", str(tmp_path / "w.json")]) == 2
    err = capsys.readouterr().err
    assert "connection refused" in err and "nothing was recorded" in err
    assert kvviz.cli.main(["watch", "ftp://x", "--seconds", "1", "--out", str(tmp_path / "w.json")]) == 2
