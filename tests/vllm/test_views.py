"""The frames the vLLM panels draw (kvviz.vllm.views): the pool picture, prefix tree, blocks table,
histograms and history from a real captured state (tests/data/vllm), and the block a prefix must
fill to hit, with its never-hits sentence (the real fleet capture, and built cache groups)."""
from kvviz.vllm import charts, views
from kvviz.vllm.metrics import EngineMetrics, parse_metrics
from kvviz.vllm.state import EngineState, apply_scrape
from vllm_payloads import USABLE_BLOCKS, metrics_text, replayed_pool


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


def test_the_never_hits_sentence_names_the_servers_hit_block(fleet_capture):
    recording, view, states = fleet_capture
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
