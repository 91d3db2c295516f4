"""Many requests through transformers' continuous batching on a tiny model (kvviz.serving.compute):
tokens, blocks, waiting and preemption, prefix reuse, limits, and the charts' Vega-Lite over a run (the
page: test_panel.py)."""
import pytest
import torch
from tiny import tiny_lm

from kvviz.core.errors import UserError
from kvviz.viz import charts
from kvviz.serving import compute as serving
from kvviz.serving import charts as sc
from kvviz.core.blocks import cdiv

PROMPTS = ["Hello there, how are you?", "Attention reads the cache instead of recomputing the whole prefix.",
           "Tell me a story."]
PREFIX = "The key value cache keeps the keys and values of every past token. "
MAX_NEW = 8


@pytest.fixture(scope="module")
def lm():
    return tiny_lm("llama")


def run(lm, prompts, **cfg):
    ids = serving.encode_requests(lm.tokenizer, prompts, chat=False)
    return ids, serving.run_serving(lm, ids, serving.ServingConfig(max_new_tokens=MAX_NEW, **cfg))


@pytest.fixture(scope="module")
def tight(lm):
    """Three requests all at once in a pool too small for all of them: waiting and preemption."""
    return run(lm, PROMPTS, block_size=4, num_blocks=8)


@pytest.fixture(scope="module")
def shared(lm):
    """Three requests with a common prefix, one arriving every two steps: prefix blocks reused."""
    return run(lm, [PREFIX + p for p in PROMPTS], block_size=4, num_blocks=48, arrival_every=2)


def greedy(lm, ids: list[int]) -> list[int]:
    out = lm.model.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False,
                            eos_token_id=0, pad_token_id=1)
    return out[0, len(ids):].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tight", "shared"])
def test_every_request_finishes_with_the_greedy_tokens(lm, name, request):
    ids, result = request.getfixturevalue(name)
    assert [r.request_id for r in result.requests] == ["r0", "r1", "r2"]
    assert all(s.requests[i].state == "finished" for s in result.snapshots[-1:] for i in range(3))
    for prompt, r in zip(ids, result.requests):
        expected = greedy(lm, prompt)
        assert list(r.output_ids) == expected[:len(r.output_ids)]
        assert len(r.output_ids) == MAX_NEW or r.output_ids[-1] == 0  # max length, or EOS
        assert r.prompt_tokens == len(prompt) and r.total_ms >= r.ttft_ms >= r.queued_ms >= 0


@pytest.mark.parametrize("name", ["tight", "shared"])
def test_blocks_match_tokens_and_the_pool_is_never_overcommitted(name, request):
    _, result = request.getfixturevalue(name)
    size = result.config.block_size
    assert result.source == "real" and result.num_blocks == result.config.num_blocks
    for snap in result.snapshots:
        assert snap.num_blocks == result.num_blocks
        assert snap.num_used_blocks + snap.num_cached_blocks + snap.num_free_blocks == snap.num_blocks
        assert snap.block_owners.count(serving.FREE) == snap.num_free_blocks  # allocator agrees
        for r in snap.requests:
            assert r.num_blocks == cdiv(r.cached_tokens, size)  # ceil(tokens / block_size)
            assert (r.num_blocks > 0) == (r.state in ("prefilling", "decoding"))
    for rid in ("r0", "r1", "r2"):  # at the end of each request's (last) prefill
        views = [v for s in result.snapshots for v in s.requests if v.request_id == rid]
        prefill = [v for v in views if v.step_tokens > 1][-1]
        assert prefill.num_blocks == cdiv(prefill.cached_tokens, size) and prefill.cached_tokens > 1


def test_a_small_pool_makes_requests_wait_or_be_preempted(tight):
    _, result = tight
    assert result.peak_used_blocks >= result.num_blocks - 1  # the scheduler keeps a small margin
    assert result.num_preempted >= 1
    assert any(v.state in ("waiting", "preempted") and s.num_used_blocks > 0
               for s in result.snapshots for v in s.requests)
    assert result.prefix_blocks_reused == 0


def test_later_requests_reuse_the_cached_prefix(shared):
    ids, result = shared
    reused = [r.prefix_tokens_reused for r in result.requests]
    assert reused[0] == 0 and reused[1] > 0 and reused[2] > 0
    assert all(n % 4 == 0 and n < len(p) for n, p in zip(reused, ids))
    assert result.prefix_blocks_reused == sum(reused) // 4
    assert max(s.num_shared_blocks for s in result.snapshots) >= reused[1] // 4
    assert all(s.num_used_blocks <= s.unshared_blocks for s in result.snapshots)
    first = next(v for s in result.snapshots for v in s.requests if v.request_id == "r1" and v.in_batch)
    assert first.step_tokens == ids[1].__len__() - reused[1]  # only the rest of the prompt is computed


@pytest.mark.slow
def test_unreadable_allocator_falls_back_to_a_modelled_pool(lm, monkeypatch):
    def unreadable(cache):
        raise AttributeError("no block tables here")
    monkeypatch.setattr(serving, "read_pool", unreadable)
    _, result = run(lm, PROMPTS[:2], block_size=4, num_blocks=16)
    assert result.source == "modelled" and all(s.source == "modelled" for s in result.snapshots)
    assert all(s.num_free_blocks == s.block_owners.count(serving.FREE) for s in result.snapshots)
    assert all(len(r.output_ids) > 0 for r in result.requests)


@pytest.mark.slow
def test_a_run_past_its_time_limit_stops_and_leaves_the_model_usable(lm):
    ids = serving.encode_requests(lm.tokenizer, PROMPTS, chat=False)
    with pytest.raises(TimeoutError):
        serving.run_serving(lm, ids, serving.ServingConfig(block_size=4, num_blocks=16, time_limit_s=0.0))
    assert lm.model.config._attn_implementation == "sdpa"
    assert len(greedy(lm, ids[0])) == MAX_NEW


def test_requests_that_can_never_fit_are_refused(lm):
    ids = serving.encode_requests(lm.tokenizer, PROMPTS, chat=False)
    with pytest.raises(UserError, match="enlarge the pool"):
        serving.check_fits(ids, serving.ServingConfig(block_size=4, num_blocks=3, max_new_tokens=8))
    with pytest.raises(UserError, match="at least 4"):
        serving.check_fits(ids, serving.ServingConfig(block_size=2))
    with pytest.raises(UserError):
        serving.parse_requests("\n \n")
    assert serving.parse_requests(" a \n\n b ") == ["a", "b"]


@pytest.mark.slow
def test_charts_have_stable_vegas(shared):
    _, result = shared
    ids, steps = ["r0", "r1", "r2"], result.snapshots
    grid = sc.pool_grid_chart(sc.grid_frame(steps[-1]), ids, result.num_blocks).to_dict()
    assert grid["layer"][0]["mark"]["type"] == "rect"
    assert grid["layer"][0]["encoding"]["color"]["scale"]["domain"] == ids + ["shared", "cached", "free"]
    usage = sc.usage_chart(sc.usage_frame(steps), result.num_blocks, len(steps)).to_dict()
    assert usage["layer"][0]["encoding"]["x"]["scale"]["domain"] == [1, len(steps) + 0.5]
    assert usage["layer"][1]["encoding"]["color"]["scale"]["domain"][-1] == f"pool size: {result.num_blocks} blocks"
    assert set(sc.usage_frame(steps)["series"]) == set(sc.USAGE_COLORS)
    lanes = sc.timeline_chart(sc.timeline_frame(steps), ids, len(steps)).to_dict()
    assert lanes["encoding"]["y"]["scale"]["domain"] == ids
    reuse = sc.reuse_frame(result)
    assert reuse.groupby("request_id")["tokens"].sum().tolist() == [r.prompt_tokens for r in result.requests]
    assert sc.reuse_chart(reuse).to_dict()["mark"]["type"] == "bar"
    assert list(sc.requests_frame(result)["request_id"]) == ids
    assert sc.grid_frame(steps[0], columns=16)["row"].max() == (result.num_blocks - 1) // 16
    for chart in (sc.pool_grid_chart(sc.grid_frame(steps[0]), ids, result.num_blocks),
                  sc.usage_chart(sc.usage_frame([]), result.num_blocks, len(steps))):
        vega = charts.to_vega_lite(chart)  # built once per run; each step only swaps the "table" rows
        assert vega["data"] == {"name": charts.TABLE} and "data" not in vega["layer"][0]


def test_axis_estimates_from_the_requests():
    ids = [[1] * 10, [2] * 30, [3] * 5]
    cfg = serving.ServingConfig(block_size=4, max_new_tokens=8, arrival_every=3, max_batch_tokens=16)
    assert serving.expected_steps(ids, cfg) == max(2 * 3, cdiv(45, 16)) + 8 + 1
    assert serving.unshared_blocks_bound(ids, cfg) == cdiv(18, 4) + cdiv(38, 4) + cdiv(13, 4)


@pytest.mark.slow
def test_slow_motion_pauses_the_loop_but_no_time_shown(lm):
    import time
    ids = serving.encode_requests(lm.tokenizer, PROMPTS[:1], chat=False)
    started = time.perf_counter()
    result = serving.run_serving(lm, ids, serving.ServingConfig(block_size=4, num_blocks=16, max_new_tokens=4,
                                                                step_delay_ms=250))
    wall_s = time.perf_counter() - started
    steps = len(result.snapshots)
    assert steps >= 3 and wall_s >= (steps - 1) * 0.25  # the loop really waited after each step
    assert sorted(s.step_ms for s in result.snapshots)[steps // 2] < 250  # ...but steps' times hold no pause
    assert result.total_s < wall_s - (steps - 1) * 0.25 * 0.9
    assert result.snapshots[-1].time_s < result.total_s
