"""The fleet (kvviz.vllm.fleet, fleet_model, fleet_frames, fleet_charts) on a real two-replica
capture (tests/data/vllm/fleet/README.md) and on small built streams; the live servers are in
test_integration.py."""
from pathlib import Path

import msgspec
import pytest

from kvviz.core.errors import UserError
from kvviz.vllm import fleet, fleet_charts, fleet_frames, fleet_model, views
from kvviz.vllm.fleet_model import ModelPool
from kvviz.vllm.events import BlockStored, KVEventBatch
from kvviz.vllm.metrics import EngineMetrics
from kvviz.vllm.pool import CachedBlocks
from kvviz.vllm.trace import Recording, ReplyRecord, states_at
from kvviz.vllm.request_log import Reply
from kvviz.vllm.state import EngineState

FLEET = Path(__file__).resolve().parents[1] / "data" / "vllm" / "fleet"
PROBES = {"cap2-a-probe": "cap2-a-blind", "cap2-b-probe": "cap2-b-blind",
          "cap2-chat-2-probe": "cap2-chat-2", "cap2-a-evicted-probe": "cap2-a-evicted"}


@pytest.fixture(scope="module")
def captured():
    recording = Recording.load(FLEET / "watch.json")
    return recording, fleet.fleet_requests(recording), states_at(recording)


def test_what_the_serving_replica_held_is_what_vllm_said_it_cached(captured):
    _, view, _ = captured
    assert len(view.requests) == 18 and all(r.complete for r in view.requests)
    for r in view.requests:
        assert r.held[r.replica] == r.cached_tokens, r.row()


def test_the_best_replica_is_confirmed_by_the_probe_sent_there(captured):
    """Each prefix-blind request is followed by the same prompt sent to the replica that held it:
    vLLM's own cached_tokens there is the 'best replica' figure kvviz derived from events."""
    _, view, _ = captured
    by_name = {r.name: r for r in view.requests}
    for probe, checked in PROBES.items():
        assert by_name[checked].given_up > 0
        assert (by_name[checked].best_replica, by_name[checked].best_tokens) == \
            (by_name[probe].replica, by_name[probe].cached_tokens), checked


def test_locality_given_up_is_said_per_request_and_in_total(captured):
    _, view, _ = captured
    blind = {r.name: r for r in view.requests}["cap2-a-blind"]
    assert blind.reason() == ("r0 held 128 tokens of its prompt, r1 (where it went) 0: 128 tokens computed "
                              "again; load does not explain it (r1 had 0 requests in flight, r0 0): a "
                              "prefix-blind choice")
    totals = fleet.totals(view.requests)
    assert (totals["achieved_tokens"], totals["available_tokens"], totals["given_up_tokens"],
            totals["requests_given_up"]) == (1056, 1504, 448, 6)
    assert fleet_frames.totals_sentence(totals).endswith("Locality given up: 448 tokens in 6 requests.")


def test_the_model_routed_as_it_really_was_reproduces_every_request(captured):
    recording, view, states = captured
    df = fleet_frames.policies_frame(recording, view, states)
    rows = df.set_index("policy")
    assert rows.loc["as routed", "matches_real"] == rows.loc["as routed", "requests"] == 18
    assert rows.loc["as routed", "cached_tokens"] == 1056  # vLLM's own total
    assert rows.loc["longest-prefix", "cached_tokens"] >= rows.loc["as routed", "cached_tokens"]
    assert rows.loc["round-robin", "recomputed_tokens"] == rows.loc["round-robin", "prompt_tokens"] - \
        rows.loc["round-robin", "cached_tokens"]


def test_the_frames_and_charts_of_the_capture(captured):
    recording, view, states = captured
    replicas = fleet_frames.replicas_frame(recording, view, states)
    assert list(replicas.replica) == ["r0", "r1"] and list(replicas.usable_blocks) == [23, 23]
    assert list(replicas.requests) == [12, 6] and replicas.view_complete.all()
    requests = fleet_frames.requests_frame(view)
    assert list(requests.columns) == fleet_frames.REQUEST_COLUMNS and len(requests) == 18
    bars = fleet_frames.given_up_frame(view)
    assert bars.tokens.sum() == 1056 + 448
    for chart in (fleet_charts.given_up_chart(bars), fleet_charts.replicas_chart(replicas),
                  fleet_charts.policies_chart(fleet_frames.policies_frame(recording, view, states))):
        assert chart.to_dict()["mark"]


def test_the_fleet_before_the_last_requests_holds_fewer(captured):
    recording, _, _ = captured
    times = sorted(r.t_s for r in recording.replies)
    half = times[8]
    assert len(fleet.fleet_requests(fleet.cut(recording, half)).requests) == sum(t <= half for t in times) < 18


# --- the model on built streams --------------------------------------------------------------------
def test_the_model_evicts_the_least_recently_freed_and_a_request_s_tail_first():
    pool = ModelPool(num_usable=4, block_size=2)
    assert pool.serve([1, 2, 3, 4, 5], [6]) == 0  # 5 computed tokens: 3 blocks, 2 cached ([1 2] [3 4])
    assert pool.serve([9, 9, 9], [9]) == 0  # 3 computed: 2 blocks, from the free queue's front
    # front then: block 4 (never used), then A's reversed blocks: [5], [3 4], [1 2] -> [5] and 4 taken
    assert pool.serve([1, 2, 3, 4, 0], [7]) == 4  # A's two cached blocks survived
    pool2 = ModelPool(num_usable=4, block_size=2)
    pool2.serve([1, 2, 3, 4, 5], [6])
    pool2.serve([8, 8, 8, 8, 8], [8])  # 3 blocks: the unused one, then A's tail [5], then [3 4]
    assert pool2.serve([1, 2, 3, 4, 0], [7]) == 2  # only A's first block is left


def test_the_model_refuses_what_it_cannot_queue_and_unknown_policies():
    with pytest.raises(UserError, match="needs 3 blocks, 2 free"):
        ModelPool(num_usable=2, block_size=2).serve([1, 2, 3, 4, 5], [6])
    reply = Reply(name="a", url="u", sent_s=1.0, done_s=2.0, prompt_tokens=2, prompt_token_ids=[1, 2])
    with pytest.raises(UserError, match="unknown routing policy"):
        fleet_model.replay([reply], ["u"], "random", [4], 2)


def test_a_long_request_log_is_analysed_from_its_newest_lines(captured):
    recording, _, _ = captured
    many = Recording(recording.meta, recording.batches, recording.scrapes, [], [])
    for k in range(30):  # 540 lines: the log's 18, again and again, later each time
        for r in recording.replies:
            reply = msgspec.structs.replace(r.reply, name=f"{r.reply.name}-{k}", sent_s=r.reply.sent_s + 100 * k,
                                            done_s=r.reply.done_s + 100 * k)
            many.replies.append(ReplyRecord(r.t_s + 100 * k, reply))
    view = fleet.fleet_requests(many)
    assert len(view.requests) == fleet.MAX_FLEET_REQUESTS == 500
    assert view.requests[-1].name == "cap2-a-evicted-probe-29"


# --- the block hits come in ---------------------------------------------------------------------
def test_the_never_hits_sentence_names_the_servers_hit_block(captured):
    recording, view, states = captured
    for state in states.values():
        assert views.hit_block(state) == (32, "events")
        assert "a shared prefix shorter than 32 tokens never hits on this server" in views.never_hits_sentence(state)
    assert all(r.cached_tokens % 32 == 0 for r in view.requests)  # vLLM's own figures: whole blocks
    edited = {r.name: r for r in view.requests}["cap2-a-edited"]  # shares 6 tokens with a-first: < 32
    assert edited.cached_tokens == 0


def test_the_hit_block_is_the_lcm_of_the_cache_groups_else_the_metrics():
    state = EngineState(key="x")
    assert views.hit_block(state) == (None, "") and views.never_hits_sentence(state) is None
    state.metrics = EngineMetrics(engine="0", cache_config={"block_size": "64"})
    assert views.hit_block(state) == (64, "metrics")
    state.pool.group_block_sizes.update({0: 32, 1: 96})  # e.g. a sliding group's own block beside full
    assert views.hit_block(state) == (96, "events")
    assert "(cache groups: 0: 32, 1: 96)" in views.never_hits_sentence(state)


# --- which replica holds which prefix ---------------------------------------------------------
def test_the_prefix_map_merges_the_replicas_by_block_hash(captured):
    recording, view, _ = captured
    rows = {r["prefix"]: r for r in fleet.prefix_rows(view, [r.reply for r in recording.replies])}
    # at the end: A on both (r0 stored it again after the fillers, r1 holds chat-2-probe's 6 blocks),
    # B only on r1 (the fillers evicted b-blind's blocks from r0)
    assert (rows["cap2-a-first"]["r0"], rows["cap2-a-first"]["r1"], rows["cap2-a-first"]["replicas_holding"]) == (128, 192, 2)
    assert (rows["cap2-b-first"]["r0"], rows["cap2-b-first"]["r1"]) == (0, 128)
    df = fleet_frames.prefix_frame(recording, view)
    assert set(df.replica) == {"r0", "r1"} and len(df) == 2 * len(rows)
    assert fleet_charts.prefix_map_chart(df).to_dict()["layer"]


def test_chain_depths_count_only_chains_that_reach_a_first_block():
    pool = CachedBlocks()
    block = lambda h, parent: BlockStored(block_hashes=[h], parent_block_hash=parent, token_ids=[h, h],  # noqa: E731
                                          block_size=2, lora_id=None, medium="GPU", lora_name=None)
    batch = [block(1, None), block(2, 1), block(3, 2), block(4, 1), block(10, None), block(21, 20)]
    pool.apply(0, KVEventBatch(1.0, batch, 0))
    assert fleet.chain_depths(pool) == {1: 3, 10: 1}  # 21's parent 20 was never cached: an orphan
