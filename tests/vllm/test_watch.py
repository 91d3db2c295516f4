"""Watching an engine end to end over real sockets (kvviz.vllm.watch), with captured payloads
(tests/vllm_fake.py): replay of missed batches, gaps, restarts, reconnects, and every kind of bad
input becoming a clear status line, never an exception. The real server is
tests/vllm/test_integration.py; URLs and HTTP are test_client.py's, sockets' roles test_subscriber.py's."""
import time

import pytest

from kvviz.vllm.watch import EngineWatch
from tests.vllm.conftest import wait_for
from vllm_fake import FakeVllm, free_port
from vllm_payloads import frames, replayed_pool


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


def test_hosted_engine_allowlist():
    from kvviz.app.hosted import engine_urls
    assert engine_urls({}) == []
    assert engine_urls({"KVVIZ_ENGINE_URLS": "http://a:8000/, http://b:8000"}) == ["http://a:8000", "http://b:8000"]


