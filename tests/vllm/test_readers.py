"""The vLLM readers on real captured payloads (tests/data/vllm): event schema, rebuilt prefix cache,
Prometheus metrics, frames for the panels, and the watch file format."""
import msgspec
import pytest

from kvviz.core.trace import TraceError
from kvviz.vllm import charts, views
from kvviz.vllm.events import (AllBlocksCleared, BlockRemoved, BlockStored, SchemaMismatch,
                               decode_message, decode_payload)
from kvviz.vllm.metrics import NotVllmMetrics, parse_metrics
from kvviz.vllm.pool import CachedBlocks
from kvviz.vllm.trace import BatchRecord, Recording, ScrapeRecord, states_at
from kvviz.vllm.state import EngineState, apply_scrape, format_summary, summary
from vllm_payloads import frames, json_file, metrics_text

BLOCK_SIZE = 32
USABLE_BLOCKS = 71  # --num-gpu-blocks-override 72, less vLLM's null block


def messages():
    return [decode_message(f) for f in frames()]


def replayed_pool(upto: int | None = None) -> CachedBlocks:
    pool = CachedBlocks()
    for m in messages()[:upto]:
        pool.apply(m.seq, m.batch)
    return pool


def test_every_captured_message_decodes_in_order_with_all_three_kinds():
    msgs = messages()
    assert [m.seq for m in msgs] == list(range(len(msgs)))
    kinds = {type(e) for m in msgs for e in m.batch.events}
    assert kinds == {BlockStored, BlockRemoved, AllBlocksCleared}
    assert all(m.batch.data_parallel_rank == 0 for m in msgs)


def test_first_batch_is_the_first_request_s_ten_full_blocks():
    (event,) = messages()[0].batch.events
    assert isinstance(event, BlockStored)
    assert event.parent_block_hash is None and event.block_size == BLOCK_SIZE
    assert len(event.block_hashes) == 10 and len(event.token_ids) == 10 * BLOCK_SIZE  # (331+16-1)//32
    assert event.medium == "GPU" and event.kv_cache_spec_kind == "full_attention"
    assert all(isinstance(h, int) for h in event.block_hashes)


def test_a_payload_of_another_schema_is_a_schema_mismatch():
    payload = msgspec.msgpack.encode([1.0, [{"type": "BlockMoved", "block_hashes": [1]}], 0])
    with pytest.raises(SchemaMismatch, match="another vLLM version"):
        decode_payload(payload)
    with pytest.raises(SchemaMismatch, match="2 frames"):
        decode_message(frames()[0][:2])
    with pytest.raises(SchemaMismatch, match="sequence frame is 4 bytes"):
        decode_message([b"", b"\0\0\0\1", frames()[0][2]])


def test_rebuilt_pool_counts_stores_evictions_clear_and_reuse_reports():
    pool = replayed_pool()
    c = pool.counts
    assert (c.num_removed, c.num_cleared) == (104, 1)
    assert c.reused_tokens == 3840  # == vllm:prefix_cache_hits_total in metrics_after_load
    assert c.num_reused * BLOCK_SIZE == c.reused_tokens
    assert pool.num_cached_blocks == 11  # after the reset only the last request's (347+8-1)//32 blocks
    assert pool.num_cached_blocks <= USABLE_BLOCKS


def test_reported_hits_equal_the_server_s_prefix_cache_hits():
    before_reset = parse_metrics(metrics_text("after_load"))["0"]
    assert replayed_pool().counts.reused_tokens == before_reset.prefix_cache_hits


def test_cached_blocks_never_exceed_the_pool_and_eviction_fills_it():
    pool, peak = CachedBlocks(), 0
    for m in messages():
        pool.apply(m.seq, m.batch)
        peak = max(peak, pool.num_cached_blocks)
        assert pool.num_cached_blocks <= USABLE_BLOCKS
    assert peak >= USABLE_BLOCKS - 8  # evictions start only once the pool is (nearly) full


def test_prefix_tree_shares_the_system_prompt_blocks():
    pool = replayed_pool(upto=60)  # mid-load, before the reset
    leaves = pool.leaves()
    assert len(leaves) > 3
    roots = {pool.path(leaf)[0] for leaf in leaves}
    shared = views.sharers(pool)
    assert max(shared.values()) == len(leaves) >= 4  # the system prompt's first block: every sequence
    assert len(roots) == 1
    for leaf in leaves:
        path = pool.path(leaf)
        assert [pool.blocks[h].depth for h in path] == list(range(len(path)))


def test_replay_overlap_is_skipped_and_a_restart_starts_over():
    msgs = messages()
    pool = replayed_pool(upto=10)
    before = pool.counts.num_stored
    for m in msgs[5:10]:  # a replay overlapping what was already applied
        pool.apply(m.seq, m.batch)
    assert pool.counts.num_stored == before and pool.counts.num_batches == 10
    restarted = msgs[0].batch
    restarted.ts = msgs[9].batch.ts + 100  # a new server: numbers from 0 again, later clock
    pool.apply(0, restarted)
    assert pool.counts.num_restarts == 1 and pool.num_cached_blocks == 10 and pool.last_seq == 0


def test_replay_socket_frames_decode_and_end_with_the_marker():
    raw = frames("replay_from_64.jsonl")
    assert all(len(f) == 4 and f[0] == b"" for f in raw)
    assert int.from_bytes(raw[-1][2], "big", signed=True) == -1
    seqs = [decode_message(f[1:]).seq for f in raw[:-1]]
    assert seqs == list(range(64, 64 + len(seqs))) and seqs


@pytest.mark.parametrize("name", ["idle", "running", "after_load", "after_reset"])
def test_metrics_parse_per_engine(name):
    (engine,) = parse_metrics(metrics_text(name)).values()
    assert engine.engine == "0" and engine.model_name == "SmolLM2-135M-Instruct"
    assert engine.num_gpu_blocks == 72 and engine.num_usable_blocks == USABLE_BLOCKS
    assert engine.cache_config["block_size"] == "32" and engine.cache_config["enable_prefix_caching"] == "True"
    hist = engine.histograms["ttft"]
    assert hist.le[-1] == "+Inf" and sum(hist.per_bucket()) == hist.count


def test_metrics_while_running_and_after():
    running = parse_metrics(metrics_text("running"))["0"]
    assert running.num_requests_running == 4 and running.kv_cache_usage > 0
    assert running.num_held_blocks == round(running.kv_cache_usage * USABLE_BLOCKS) > 0
    after = parse_metrics(metrics_text("after_load"))["0"]
    assert after.num_requests_running == 0 and after.kv_cache_usage == 0
    assert after.prompt_tokens == 331 + 8252 and after.generation_tokens == 16 + 1129
    assert after.hit_rate == pytest.approx(3840 / 8583)
    assert after.num_requests_success == 25 and after.histograms["ttft"].count == 25


def test_text_that_is_not_vllm_metrics_is_refused():
    with pytest.raises(NotVllmMetrics, match="no vllm: series"):
        parse_metrics("# HELP up whether up\n# TYPE up gauge\nup 1\n")
    with pytest.raises(NotVllmMetrics):
        parse_metrics("<html><body>hello</body></html>")


def test_pool_picture_is_exact_when_idle():
    state = EngineState(key="x", pool=replayed_pool(), metrics=parse_metrics(metrics_text("after_reset"))["0"])
    counts = views.pool_counts(state)
    assert counts == {views.HELD: 0, views.CACHED_FREE: 11, views.FREE: USABLE_BLOCKS - 11}
    assert views.pool_frame(state)["blocks"].sum() == USABLE_BLOCKS


def test_frames_and_charts_build_from_a_real_state():
    state = EngineState(key="x", pool=replayed_pool(upto=60))
    for name in ("idle", "running", "after_load"):
        apply_scrape({"x": state}, "http://x", {}, 0.0)
        state.metrics = parse_metrics(metrics_text(name))["0"]
        state.history.append(state.history_row(len(state.history)))
    tree = views.tree_frame(state.pool)
    assert set(tree["sequence"]) and tree["shared_by"].max() >= 4
    table = views.blocks_table(state.pool)
    assert len(table) == state.pool.num_cached_blocks and table["position"].iloc[0] == 0
    hist = views.histogram_frame(state, "ttft")
    assert hist["requests"].sum() == state.metrics.histograms["ttft"].count
    assert set(views.history_frame(state)["series"]) == set(views.OVER_TIME)
    for chart in (charts.pool_chart(views.pool_frame(state), USABLE_BLOCKS), charts.tree_chart(tree),
                  charts.histogram_chart(hist, "ttft"),
                  charts.lines_chart(views.history_frame(state), "blocks", views.OVER_TIME, "blocks")):
        assert chart.to_dict()["mark"]
    assert "block_size" in set(views.config_frame(state)["setting"])


def recording_of_capture() -> Recording:
    rec = Recording({"urls": ["http://127.0.0.1:8000"]})
    for i, m in enumerate(messages()):
        rec.batches.append(BatchRecord(i * 0.5, "http://127.0.0.1:8000", 0, m.seq, m.batch))
    for t, name in ((0.0, "idle"), (20.0, "running"), (60.0, "after_reset")):
        rec.scrapes.append(ScrapeRecord(t, "http://127.0.0.1:8000", parse_metrics(metrics_text(name))))
    return rec


def test_watch_file_round_trips_and_replays_the_same_state(tmp_path):
    rec = recording_of_capture()
    path = tmp_path / "watch.json"
    rec.save(path)
    loaded = Recording.load(path)
    assert len(loaded.batches) == len(rec.batches) and loaded.batches[5].batch == rec.batches[5].batch
    (state,) = states_at(loaded).values()
    assert state.pool.num_cached_blocks == replayed_pool().num_cached_blocks
    assert state.pool.counts == replayed_pool().counts
    assert len(state.history) == 3 and state.metrics.num_gpu_blocks == 72
    mid = states_at(loaded, 20.0)["127.0.0.1:8000 · rank 0"]
    assert mid.pool.counts.num_batches == 41
    text = format_summary(summary(state))
    assert "evicted 104" in text and "hit rate" in text


@pytest.mark.parametrize("doc, message", [
    (b'{"format": "kvviz-trace", "version": 1}', "not a kvviz vLLM watch"),
    (b'{"format": "kvviz-vllm-watch", "version": 1, "meta": {}}', "invalid"),
    (b'{"format": "kvviz-vllm-watch", "version": 9, "meta": {}, "batches": [], "scrapes": [], "notes": []}',
     "newer kvviz"),
    (b"not json", "not a kvviz vLLM watch"),
])
def test_bad_watch_files_are_refused_with_a_message(doc, message):
    with pytest.raises(TraceError, match=message):
        Recording.from_json(doc)


def test_server_descriptions_captured():
    assert json_file("version.json") == {"version": "0.32.0"}
    assert json_file("kv_event_sources.json")["0"]["endpoint"] == "tcp://127.0.0.1:5557"
    assert json_file("models.json")["data"][0]["id"] == "SmolLM2-135M-Instruct"
