"""The fleet (kvviz.vllm.fleet) on the real two-replica capture (tests/data/vllm/fleet/README.md,
read once: tests/vllm/conftest.py) and on small built streams: what each replica held of each
request, the best replica, locality given up and why, the prefix map, the newest requests kept,
and the cut at a time; the live servers are in test_integration.py."""
import msgspec

from kvviz.vllm import fleet, fleet_charts, fleet_frames
from kvviz.vllm.events import BlockStored, KVEventBatch
from kvviz.vllm.pool import CachedBlocks
from kvviz.vllm.trace import Recording, ReplyRecord

PROBES = {"cap2-a-probe": "cap2-a-blind", "cap2-b-probe": "cap2-b-blind",
          "cap2-chat-2-probe": "cap2-chat-2", "cap2-a-evicted-probe": "cap2-a-evicted"}


def test_what_the_serving_replica_held_is_what_vllm_said_it_cached(fleet_capture):
    _, view, _ = fleet_capture
    assert len(view.requests) == 18 and all(r.complete for r in view.requests)
    for r in view.requests:
        assert r.held[r.replica] == r.cached_tokens, r.row()


def test_the_best_replica_is_confirmed_by_the_probe_sent_there(fleet_capture):
    """Each prefix-blind request is followed by the same prompt sent to the replica that held it:
    vLLM's own cached_tokens there is the 'best replica' figure kvviz derived from events."""
    _, view, _ = fleet_capture
    by_name = {r.name: r for r in view.requests}
    for probe, checked in PROBES.items():
        assert by_name[checked].given_up > 0
        assert (by_name[checked].best_replica, by_name[checked].best_tokens) == \
            (by_name[probe].replica, by_name[probe].cached_tokens), checked


def test_locality_given_up_is_said_per_request_and_in_total(fleet_capture):
    _, view, _ = fleet_capture
    blind = {r.name: r for r in view.requests}["cap2-a-blind"]
    assert blind.reason() == ("r0 held 128 tokens of its prompt, r1 (where it went) 0: 128 tokens computed "
                              "again; load does not explain it (r1 had 0 requests in flight, r0 0): a "
                              "prefix-blind choice")
    totals = fleet.totals(view.requests)
    assert (totals["achieved_tokens"], totals["available_tokens"], totals["given_up_tokens"],
            totals["requests_given_up"]) == (1056, 1504, 448, 6)
    assert fleet_frames.totals_sentence(totals).endswith("Locality given up: 448 tokens in 6 requests.")


def test_the_fleet_before_the_last_requests_holds_fewer(fleet_capture):
    recording, _, _ = fleet_capture
    times = sorted(r.t_s for r in recording.replies)
    half = times[8]
    assert len(fleet.fleet_requests(fleet.cut(recording, half)).requests) == sum(t <= half for t in times) < 18




def test_a_long_request_log_is_analysed_from_its_newest_lines(fleet_capture):
    recording, _, _ = fleet_capture
    many = Recording(recording.meta, recording.batches, recording.scrapes, [], [])
    for k in range(30):  # 540 lines: the log's 18, again and again, later each time
        for r in recording.replies:
            reply = msgspec.structs.replace(r.reply, name=f"{r.reply.name}-{k}", sent_s=r.reply.sent_s + 100 * k,
                                            done_s=r.reply.done_s + 100 * k)
            many.replies.append(ReplyRecord(r.t_s + 100 * k, reply))
    view = fleet.fleet_requests(many)
    assert len(view.requests) == fleet.MAX_FLEET_REQUESTS == 500
    assert view.requests[-1].name == "cap2-a-evicted-probe-29"




# --- which replica holds which prefix ---------------------------------------------------------
def test_the_prefix_map_merges_the_replicas_by_block_hash(fleet_capture):
    recording, view, _ = fleet_capture
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
