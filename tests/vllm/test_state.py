"""What kvviz knows of each watched engine (kvviz.vllm.state), fed the captured stream and scrapes
(tests/data/vllm): one state per server and DP rank, duplicates kept from the ledger, a restart
starting it over, scrapes and request log lines attached and bounded, and the summary
`kvviz watch` prints."""
from kvviz.vllm import state as engine_state
from kvviz.vllm.metrics import parse_metrics
from kvviz.vllm.request_log import Reply
from kvviz.vllm.state import (apply_batch, apply_reply, apply_scrape, engine_key, format_summary, state_for,
                              summary)
from vllm_payloads import USABLE_BLOCKS, messages, metrics_text

URL = "http://127.0.0.1:8000"
KEY = "127.0.0.1:8000 · rank 0"


def test_one_state_per_server_and_rank():
    states = {}
    assert engine_key(URL, 0) == KEY and engine_key("https://gpu-3:443/v", "1") == "gpu-3:443/v · rank 1"
    first = state_for(states, URL, 0)
    assert state_for(states, URL, "0") is first and list(states) == [KEY]
    assert state_for(states, URL, 1) is not first and len(states) == 2


def test_a_duplicate_batch_misses_the_ledger_and_a_restart_starts_it_over():
    msgs, states = messages(), {}
    for m in msgs[:3]:
        apply_batch(states, URL, 0, m.seq, m.batch)
    rows = states[KEY].request_rows()
    apply_batch(states, URL, 0, msgs[1].seq, msgs[1].batch)  # replay overlapping the live stream
    assert states[KEY].request_rows() == rows and states[KEY].pool.counts.num_batches == 3
    restarted = msgs[0].batch
    restarted.ts = msgs[2].batch.ts + 100  # a new server: numbers from 0 again, later clock
    apply_batch(states, URL, 0, 0, restarted)
    assert states[KEY].pool.counts.num_restarts == 1
    assert [r["stored_blocks"] for r in states[KEY].request_rows()] == [10]  # only the first request's batch


def test_a_scrape_attaches_each_engine_s_metrics_and_a_bounded_history(monkeypatch):
    monkeypatch.setattr(engine_state, "MAX_HISTORY", 2)
    states = {}
    for t, name in enumerate(("idle", "running", "after_load")):
        apply_scrape(states, URL, parse_metrics(metrics_text(name)), float(t))
    state = states[KEY]
    assert state.metrics.num_requests_success == 25 and state.ledger.usable_blocks == USABLE_BLOCKS
    assert [row["t_s"] for row in state.history] == [1.0, 2.0]
    running = state.history[0]
    assert running["num_requests_running"] == 4 and running["num_held_blocks"] > 0


def test_request_log_lines_go_to_their_server_s_rank_0_newest_kept(monkeypatch):
    monkeypatch.setattr(engine_state, "MAX_REPLIES", 2)
    states = {}
    for i in range(3):
        apply_reply(states, Reply(name=f"r{i}", url=URL, sent_s=float(i), done_s=i + 0.5, prompt_tokens=4))
    assert list(states) == [KEY] and [r.name for r in states[KEY].replies] == ["r1", "r2"]


def test_the_summary_before_and_after_the_metrics():
    states = {}
    for m in messages():
        apply_batch(states, URL, 0, m.seq, m.batch)
    bare = format_summary(summary(states[KEY]))
    assert bare.startswith(f"{KEY}: {len(messages())} event batches")
    assert bare.endswith("hit rate (metrics, since server start): no queries yet") and "peak held" not in bare
    apply_scrape(states, URL, parse_metrics(metrics_text("after_load")), 1.0)
    row = summary(states[KEY])
    assert (row["usable_blocks"], row["cached_blocks_now"], row["blocks_removed"]) == (USABLE_BLOCKS, 11, 104)
    text = format_summary(row)
    assert f"{3840 / 8583:.1%}" in text and f"of {USABLE_BLOCKS} usable" in text
