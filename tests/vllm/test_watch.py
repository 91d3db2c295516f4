"""Watching an engine end to end over real sockets, with captured payloads (tests/vllm_fake.py):
discovery, bind/connect roles, replay of missed batches, restarts, and every kind of bad input
becoming a clear status line, never an exception. The real server is tests/vllm/test_integration.py."""
import json
import time

import pytest

from kvviz import cli
from kvviz.vllm import client
from kvviz.vllm.client import EngineError, normalize_url
from kvviz.vllm.trace import Recording, states_at
from kvviz.vllm.state import request_rows
from kvviz.vllm.subscriber import publisher_binds, resolve_source
from kvviz.vllm.watch import EngineWatch
from vllm_fake import FakeVllm, free_port
from vllm_payloads import frames
from tests.vllm.test_readers import replayed_pool

WAIT_S = 15


def wait_for(predicate, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def fake():
    server = FakeVllm()
    yield server
    server.close()


def watching(urls, **kw) -> EngineWatch:
    return EngineWatch(urls, scrape_every_s=0.2, timeout_s=2.0, **kw).start()


def pool_of(watch: EngineWatch):
    return watch.read(lambda states, conns: next(iter(states.values())).pool if states else None)


@pytest.mark.slow
def test_missed_batches_are_replayed_then_live_ones_follow(fake):
    n_before = fake.publish_captured(upto=30)  # published before kvviz attached: only replay has them
    watch = watching([fake.url])
    try:
        assert wait_for(lambda: watch.connections[0].ok), watch.connections[0].status
        assert wait_for(lambda: pool_of(watch) is not None and pool_of(watch).counts.num_batches == n_before)
        time.sleep(0.3)  # let vLLM's PUB connect to the SUB kvviz bound
        for f in frames()[30:]:
            fake.publish(int.from_bytes(f[1], "big"), f[2])
            time.sleep(0.002)
        expected = replayed_pool()
        assert wait_for(lambda: pool_of(watch).counts.num_batches == expected.counts.num_batches)
        with watch.lock:
            pool = next(iter(watch.states.values())).pool
            assert pool.counts == expected.counts and dict(pool.copies) == dict(expected.copies)
            assert next(iter(watch.states.values())).metrics.num_gpu_blocks == 72
    finally:
        watch.stop()


@pytest.mark.slow
def test_a_gap_in_sequence_numbers_is_filled_from_replay(fake):
    watch = watching([fake.url])
    try:
        assert wait_for(lambda: watch.connections[0].ok)
        time.sleep(0.3)
        captured = frames()
        with fake.lock:  # batches 0..9 reach the replay buffer but not the wire
            fake.buffer.extend((int.from_bytes(f[1], "big"), f[2]) for f in captured[:10])
        fake.publish(10, captured[10][2])
        assert wait_for(lambda: pool_of(watch) is not None and pool_of(watch).counts.num_batches == 11)
        assert pool_of(watch).counts == replayed_pool(upto=11).counts
    finally:
        watch.stop()


@pytest.mark.slow
def test_a_restarted_server_s_sequence_starts_over(fake):
    fake.publish_captured(upto=20)
    watch = watching([fake.url])
    try:
        assert wait_for(lambda: pool_of(watch) is not None and pool_of(watch).counts.num_batches == 20)
        time.sleep(0.3)
        first = frames()[0][2]
        import msgspec
        doc = msgspec.msgpack.decode(first)
        doc[0] += 3600  # the new server's clock is later; its numbers restart at 0
        fake.publish(0, msgspec.msgpack.encode(doc))
        assert wait_for(lambda: pool_of(watch).counts.num_restarts == 1)
        assert pool_of(watch).num_cached_blocks == 10
        notes = [n.text for n in watch.recording.notes]
        assert any("restarted" in n for n in notes)
    finally:
        watch.stop()


@pytest.mark.slow
def test_a_payload_of_another_schema_becomes_a_status_line(fake):
    watch = watching([fake.url])
    try:
        assert wait_for(lambda: watch.connections[0].ok)
        time.sleep(0.3)
        import msgspec
        fake.publish(0, msgspec.msgpack.encode([1.0, [{"type": "Teleported"}], 0]))
        fake.publish(1, frames()[0][2])  # a good batch right behind the bad one still counts
        assert wait_for(lambda: "schema" in watch.connections[0].status)
        assert watch.running
        assert wait_for(lambda: pool_of(watch) is not None and pool_of(watch).num_cached_blocks == 10)
        assert any("replayed batch(es) skipped" in n.text for n in watch.recording.notes)
    finally:
        watch.stop()


@pytest.mark.parametrize("routes, message", [
    ({}, "answered HTTP 404"),  # something else answers: not vLLM
    ({"/version": '{"version": "0.32.0"}', "/v1/models": '{"data": []}', "/kv_event_sources": "{}"},
     "publishes no KV-cache events"),
    ({"/version": '{"version": "0.8.0"}', "/v1/models": '{"data": []}'}, "kvviz reads vLLM 0.32 or newer"),
    ({"/version": "<html>", "/v1/models": "{}"}, "did not answer JSON"),
])
def test_servers_kvviz_cannot_read_are_named_and_retried(routes, message):
    server = FakeVllm(routes=routes, events=False)
    watch = watching([server.url])
    try:
        assert wait_for(lambda: message in watch.connections[0].status), watch.connections[0].status
        assert "retrying" in watch.connections[0].status and not watch.connections[0].ok
    finally:
        watch.stop()
        server.close()


def test_an_unreachable_url_is_named_and_retried():
    url = f"http://127.0.0.1:{free_port()}"
    watch = watching([url])
    try:
        assert wait_for(lambda: "connection refused" in watch.connections[0].status)
        assert url in watch.connections[0].status
    finally:
        watch.stop()


@pytest.mark.slow
def test_the_watch_reconnects_when_the_server_comes_back(fake):
    fake.publish_captured(upto=5)
    watch = watching([fake.url])
    try:
        assert wait_for(lambda: watch.connections[0].ok)
        saved = dict(fake.routes)
        fake.routes.clear()
        assert wait_for(lambda: not watch.connections[0].ok)
        fake.routes.update(saved)
        assert wait_for(lambda: watch.connections[0].ok)
    finally:
        watch.stop()


def test_a_second_subscriber_on_the_same_engine_is_told_why_it_cannot_listen(fake):
    first = watching([fake.url])
    second = None
    try:
        assert wait_for(lambda: first.connections[0].ok)
        second = watching([fake.url])
        assert wait_for(lambda: "address is in use" in second.connections[0].status)
    finally:
        first.stop()
        if second:
            second.stop()


@pytest.mark.parametrize("url, expected", [
    ("localhost:8000/", "http://localhost:8000"), (" http://127.0.0.1:8000 ", "http://127.0.0.1:8000"),
    ("https://vllm.example:443/base/", "https://vllm.example:443/base")])
def test_urls_are_normalized(url, expected):
    assert normalize_url(url) == expected


@pytest.mark.parametrize("url", ["", "ftp://host", "http://", "http://h:99999", "http://u:p@h:1",
                                 "http://h:1/?q=1"])
def test_bad_urls_are_refused_with_a_message(url):
    with pytest.raises(EngineError):
        normalize_url(url)


def test_socket_roles_follow_vllm_s_publisher():
    assert publisher_binds("tcp://*:5557") and publisher_binds("ipc:///tmp/kv")
    assert not publisher_binds("tcp://127.0.0.1:5557")
    local = resolve_source("0", {"endpoint": "tcp://127.0.0.1:5557",
                                 "replay_endpoint": "tcp://127.0.0.1:5558"}, "127.0.0.1")
    assert local.sub_binds and local.sub_address == "tcp://127.0.0.1:5557"
    remote = resolve_source("1", {"endpoint": "tcp://*:5558", "replay_endpoint": "tcp://*:5559"}, "gpu-node-3")
    assert not remote.sub_binds and remote.sub_address == "tcp://gpu-node-3:5558"
    assert remote.replay_address == "tcp://gpu-node-3:5559" and remote.rank == 1


def test_only_loopback_and_the_server_s_host_are_contacted():
    with pytest.raises(EngineError, match="its own loopback"):
        resolve_source("0", {"endpoint": "tcp://127.0.0.1:5557"}, "gpu-node-3")
    with pytest.raises(EngineError, match="another host"):
        resolve_source("0", {"endpoint": "tcp://*:5557", "replay_endpoint": "tcp://10.9.9.9:5558"}, "gpu-node-3")


@pytest.mark.parametrize("endpoint, replay, server, message", [
    ("tcp://0.0.0.0:5557", None, "127.0.0.1", "every interface"),
    ("tcp://10.1.2.3:5557", None, "127.0.0.1", "off this machine's loopback"),
    ("ipc:///tmp/kv-events", None, "gpu-node-3", "local socket file"),
    ("tcp://*:5557", "ipc:///tmp/kv-replay", "gpu-node-3", "local socket file"),
    ("tcp://*:5557", "tcp://evil.example:5558", "gpu-node-3", "another host"),
])
def test_the_server_s_reply_never_decides_where_kvviz_opens_a_socket(endpoint, replay, server, message):
    with pytest.raises(EngineError, match=message):
        resolve_source("0", {"endpoint": endpoint, "replay_endpoint": replay}, server)


def test_a_wildcard_of_either_family_is_read_on_the_server_s_own_host():
    for endpoint in ("tcp://[2001:db8::7]:5557", "tcp://[::]:5557", "tcp://*:5557"):
        source = resolve_source("0", {"endpoint": endpoint}, "gpu-node-3")
        assert source.sub_address == "tcp://gpu-node-3:5557" and not source.sub_binds


def test_hosted_engine_allowlist():
    from kvviz.app.hosted import engine_urls
    assert engine_urls({}) == []
    assert engine_urls({"KVVIZ_ENGINE_URLS": "http://a:8000/, http://b:8000"}) == ["http://a:8000", "http://b:8000"]


@pytest.mark.slow
def test_kvviz_watch_records_a_file_that_replays(fake, tmp_path, capsys):
    fake.publish_captured()
    out, rows_path = tmp_path / "watch.json", tmp_path / "requests.json"
    assert cli.main(["watch", fake.url, "--seconds", "3", "--scrape-every", "0.5", "--out", str(out),
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
    assert cli.main(["watch", url, "--seconds", "1", "--out", str(tmp_path / "w.json")]) == 2
    err = capsys.readouterr().err
    assert "connection refused" in err and "nothing was recorded" in err
    assert cli.main(["watch", "ftp://x", "--seconds", "1", "--out", str(tmp_path / "w.json")]) == 2


def test_get_text_names_timeouts_and_refusals():
    with pytest.raises(client.EngineUnreachable, match="refused"):
        client.get_text(f"http://127.0.0.1:{free_port()}", "/metrics", 1.0)


def test_a_url_urllib_refuses_is_said_in_kvviz_words():
    """urllib's ValueError ("Invalid IPv6 URL") becomes a UserError in kvviz's own sentence."""
    with pytest.raises(client.EngineUnreachable, match="not a URL urllib can open") as info:
        client.get_text("http://[::1", "/metrics", 1.0)
    assert "IPv6" not in str(info.value)
