"""The fleet view's tables (kvviz.vllm.fleet_frames) on the real two-replica capture
(tests/data/vllm/fleet/README.md): a row per replica, per request, the per-request bars' long form,
and the what-if policies refused in a sentence when no scrape gave a replica's pool."""
from kvviz.vllm import fleet_frames


def test_the_frames_of_the_capture(fleet_capture):
    recording, view, states = fleet_capture
    replicas = fleet_frames.replicas_frame(recording, view, states)
    assert list(replicas.replica) == ["r0", "r1"] and list(replicas.usable_blocks) == [23, 23]
    assert list(replicas.requests) == [12, 6] and replicas.view_complete.all()
    requests = fleet_frames.requests_frame(view)
    assert list(requests.columns) == fleet_frames.REQUEST_COLUMNS and len(requests) == 18
    bars = fleet_frames.given_up_frame(view)
    assert bars.tokens.sum() == 1056 + 448


def test_the_bars_are_two_per_request_in_sending_order(fleet_capture):
    _, view, _ = fleet_capture
    bars = fleet_frames.given_up_frame(view)
    assert len(bars) == 2 * len(view.requests)
    assert bars.request.tolist()[::2] == bars.request.tolist()[1::2] == [r.name for r in view.requests]
    assert bars.order.tolist()[::2] == list(range(len(view.requests)))
    given_up = bars[bars.part == "given up"]
    assert given_up.tokens.tolist() == [r.given_up for r in view.requests]


def test_the_policies_need_each_replica_s_pool_from_a_scrape(fleet_capture):
    recording, view, _ = fleet_capture
    assert fleet_frames.policies_frame(recording, view, {}) == "no /metrics scrape of r0 gave its pool size"
