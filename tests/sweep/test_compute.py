"""The sweep (kvviz.sweep.compute): the runner on a tiny model (exact prompts, out-of-memory points,
stopping, resuming) and its pure helpers (its charts: test_charts.py; its page: test_panel.py)."""
import dataclasses

import pytest
import torch
from tiny import tiny_lm

from kvviz.core.errors import UserError
from kvviz.engine import loop as engine
from kvviz.core import layout
from kvviz.sweep import compute as sweep
from kvviz.sweep.compute import SweepRow, SweepSettings

TINY_BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 4  # K and V x 2 layers x 2 KV heads x head_dim 16 x fp32


@pytest.fixture(scope="module")
def lm():
    return tiny_lm()


def ok_row(prompt_tokens: int, batch: int, wall_s: float = 1.0, **fields) -> SweepRow:
    formula = TINY_BYTES_PER_TOKEN * prompt_tokens * batch
    values = dict(prefill_kv_bytes=formula, end_kv_bytes=formula + 1, ttft_ms=5.0,
                  itl_median_ms=2.0, tokens_per_s=100.0, decode_bandwidth_bytes_per_s=1e9)
    return SweepRow(prompt_tokens=prompt_tokens, batch=batch, new_tokens=4, status="ok",
                    prefill_formula_bytes=formula, end_formula_bytes=formula + 1, wall_s=wall_s,
                    **{**values, **fields})


# ---------------------------------------------------------------- prompts


@pytest.mark.parametrize("num_tokens", [1, 7, 16, 33, 100])
def test_prompt_has_exactly_n_tokens_as_the_engine_reads_it(lm, num_tokens):
    cfg = sweep.point_config(lm.tokenizer, num_tokens, 2, 3)
    batch = engine.plan_run(lm, cfg).batch
    assert batch.prompt_len == num_tokens
    assert batch.mask.all()  # two copies of one prompt: no padding
    assert not cfg.chat_template and not cfg.stop_on_eos and cfg.greedy


# ---------------------------------------------------------------- the runner


@pytest.mark.slow
def test_two_point_sweep_measures_each_point(lm):
    settings = SweepSettings(prompt_tokens=(32, 16), batches=(1,), new_tokens=3)
    rows = list(sweep.run_sweep(lm, settings, warmup=False))
    assert [(r.prompt_tokens, r.batch, r.status) for r in rows] == [(16, 1, "ok"), (32, 1, "ok")]
    for r in rows:
        assert r.prefill_kv_bytes == r.prefill_formula_bytes == TINY_BYTES_PER_TOKEN * r.prompt_tokens
        assert r.end_kv_bytes == r.end_formula_bytes == TINY_BYTES_PER_TOKEN * (r.prompt_tokens + 2)
        assert r.ttft_ms > 0 and r.itl_median_ms > 0 and r.tokens_per_s > 0 and r.wall_s > 0
        assert r.decode_bandwidth_bytes_per_s > 0
        assert r.peak_cuda_bytes is None and r.message == ""


def fail_at(monkeypatch, bad_point, exc):
    """engine.generate raising `exc` for one (prompt_tokens, batch); the points actually run."""
    real, ran = engine.generate, []

    def generate(lm, cfg, mode="cached", should_stop=None):
        point = (engine.plan_run(lm, cfg).batch.prompt_len, cfg.batch)
        ran.append(point)
        if point == bad_point:
            raise exc
        yield from real(lm, cfg, mode, should_stop)

    monkeypatch.setattr(sweep.loop, "generate", generate)
    return ran


@pytest.mark.slow
def test_out_of_memory_point_is_recorded_and_the_sweep_continues(lm, monkeypatch):
    ran = fail_at(monkeypatch, (16, 2), torch.OutOfMemoryError("CUDA out of memory. Tried to allocate"))
    freed = []
    monkeypatch.setattr(sweep.loop, "free_device_memory", freed.append)
    rows = list(sweep.run_sweep(lm, SweepSettings((8, 16), (1, 2, 4), 2), warmup=False))
    status = {(r.prompt_tokens, r.batch): r.status for r in rows}
    assert status == {(8, 1): "ok", (16, 1): "ok", (8, 2): "ok", (16, 2): "oom", (8, 4): "ok",
                      (16, 4): "skipped"}  # needs more than (16, 2), which ran out: not run
    assert (16, 4) not in ran and freed == [lm.device]
    oom = next(r for r in rows if r.status == "oom")
    assert oom.message.startswith("OutOfMemoryError: CUDA out of memory")
    assert oom.ttft_ms is None and oom.prefill_kv_bytes is None
    assert oom.end_formula_bytes == TINY_BYTES_PER_TOKEN * 17 * 2  # the prediction stays


def test_runtime_error_saying_out_of_memory_counts_as_oom(lm, monkeypatch):
    fail_at(monkeypatch, (8, 1), RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"))
    monkeypatch.setattr(sweep.loop, "free_device_memory", lambda device: None)
    (row,) = sweep.run_sweep(lm, SweepSettings((8,), (1,), 2), warmup=False)
    assert row.status == "oom"


def test_other_errors_are_not_swallowed(lm, monkeypatch):
    fail_at(monkeypatch, (8, 1), RuntimeError("shape mismatch"))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        list(sweep.run_sweep(lm, SweepSettings((8,), (1,), 2), warmup=False))


@pytest.mark.slow
def test_point_past_the_context_is_an_error_row(lm):
    row = sweep.run_point(lm, (250, 1), 16)  # tiny models allow 256 positions
    assert row.status == "error" and "exceeds this model's context" in row.message


@pytest.mark.slow
def test_should_stop_ends_between_and_within_points(lm):
    settings = SweepSettings((8, 16), (1,), 3)
    rows = []
    for row in sweep.run_sweep(lm, settings, warmup=False, should_stop=lambda: len(rows) >= 1):
        rows.append(row)
    assert [r.prompt_tokens for r in rows] == [8]
    calls = iter(range(100))
    assert list(sweep.run_sweep(lm, settings, warmup=False,
                                should_stop=lambda: next(calls) >= 2)) == []  # stopped mid-point


def test_a_resumed_sweep_measures_only_what_is_missing(lm):
    settings = SweepSettings((8, 16), (1, 2), 2)
    done = [ok_row(8, 1), SweepRow(prompt_tokens=8, batch=2, new_tokens=2, status="oom", prefill_formula_bytes=0,
                   end_formula_bytes=0)]
    rows = list(sweep.run_sweep(lm, settings, done=done, warmup=False))
    assert [(r.prompt_tokens, r.batch, r.status) for r in rows] == [(16, 1, "ok"), (16, 2, "skipped")]
    assert sweep.pending_points(settings, done + rows) == []


def test_new_tokens_must_allow_a_decode_step(lm):
    with pytest.raises(UserError, match="at least 2"):
        list(sweep.run_sweep(lm, SweepSettings((8,), (1,), 1)))


# ---------------------------------------------------------------- pure helpers


def test_default_prompt_lengths_are_log_spaced_up_to_model_and_device_limits():
    assert sweep.default_prompt_lengths(8192, "cpu") == [64, 128, 256, 512, 1024, 2048]
    assert sweep.default_prompt_lengths(256, "cpu", new_tokens=16) == [64, 128]
    assert sweep.default_prompt_lengths(2048, "cuda", new_tokens=16)[-1] == 1024
    assert sweep.default_prompt_lengths(None, "cuda")[-1] == 32768
    assert sweep.default_prompt_lengths(50, "cpu", new_tokens=16) == [34]
    assert sweep.prompt_length_options(256) == [16, 32, 64, 128]
    # a host's cap on prompt tokens (hosted mode) limits both
    assert sweep.prompt_length_options(8192, max_prompt_tokens=1024)[-1] == 1024
    assert sweep.default_prompt_lengths(8192, "cuda", max_prompt_tokens=1000)[-1] == 512


def test_achieved_bandwidth_is_weights_plus_cache_over_step_time():
    # 270 MB of weights + 30 MB of cache read in 1 ms: 300 GB/s
    assert sweep.achieved_bandwidth_bytes_per_s(270_000_000, 30_000_000, 1.0) == pytest.approx(3e11)
    assert sweep.achieved_bandwidth_bytes_per_s(1, 1, 0.0) is None


def test_predicted_out_of_memory_boundary():
    budget = sweep.kv_budget_bytes(100 * 10**9, 20 * 10**9)  # less weights, less 10 % overhead
    assert budget == 70 * 10**9
    assert sweep.kv_budget_bytes(None, 1) is None
    # 1,000,000 B of budget at 1,000 B per token and batch 2: 500 cached tokens each at the end
    # (prompt + 16 new - 1, the last token is never cached), so a 485-token prompt is the longest
    specs = (layout.CacheSpec(kind="full", kv_heads=1, values_per_token=250),)  # 250 values x 4 B = 1,000 B
    assert sweep.predicted_max_prompt_tokens(1_000_000, specs, 4, 2, 16) == 485
    device = sweep.DeviceFacts(name="cuda", memory_bytes=10**9, preset=None, peak_bandwidth_bytes_per_s=None,
                               kv_budget_bytes=1_000_000, bytes_per_token=1000, specs=specs, elem_bytes=4)
    rows = [ok_row(64, 2), SweepRow(prompt_tokens=512, batch=2, new_tokens=16, status="oom", prefill_formula_bytes=0,
                   end_formula_bytes=0), SweepRow(prompt_tokens=1024, batch=2, new_tokens=16, status="oom",
                   prefill_formula_bytes=0, end_formula_bytes=0)]
    assert sweep.boundary_rows(rows, device, 16) == [
        {"batch": 2, "predicted_max_prompt_tokens": 485, "first_oom_prompt_tokens": 512}]


def test_boundary_and_predicted_oom_flag_agree_with_sliding_windows():
    """The boundary table and the heatmap's 'predicted not to fit' flag are one formula: on a
    Gemma 3-style 5:1 sliding/full mix they flip at the same prompt length, for every batch."""
    config = layout.config_from_dict({"model_type": "gemma3_text", "num_hidden_layers": 6,
                                      "num_attention_heads": 2, "num_key_value_heads": 1,
                                      "head_dim": 16, "hidden_size": 32, "sliding_window": 64})
    specs = layout.layer_specs(config)
    assert {s.kind for s in specs} == {"full", "sliding"}
    budget, new_tokens = 400_000, 8
    prompts = list(range(1, 3000, 7))
    for batch in (1, 2, 3):
        longest = sweep.predicted_max_prompt_tokens(budget, specs, 4, batch, new_tokens)
        rows = [SweepRow(prompt_tokens=p, batch=batch, new_tokens=new_tokens, status="ok", prefill_formula_bytes=0,
                         end_formula_bytes=layout.formula_bytes(specs, p + new_tokens - 1, batch,
                                                                4)) for p in prompts]
        flags = sweep.rows_frame(rows, budget_bytes=budget)["predicted_oom"].tolist()
        assert flags == [p > longest for p in prompts]
        assert any(flags) and not all(flags)
    # a cache that stops growing (every layer sliding) never runs out: no boundary
    only_sliding = tuple(s for s in specs if s.kind == "sliding")
    assert sweep.predicted_max_prompt_tokens(budget, only_sliding, 4, 1, new_tokens) is None


def test_rows_frame_marks_points_predicted_not_to_fit():
    df = sweep.rows_frame([ok_row(8, 1), ok_row(64, 1)], budget_bytes=TINY_BYTES_PER_TOKEN * 20)
    assert df["predicted_oom"].tolist() == [False, True]
    assert not sweep.rows_frame([ok_row(8, 1)])["predicted_oom"].any()


SMOLLM2 = sweep.ModelWork(params=134_515_008, attention_width=30 * 9 * 64)
# SmolLM2-135M, fp32, this CPU on a quiet machine (docs: /work/shared/DESIGN.md): prompt tokens ->
# (prefill ms, decode step ms), and 0.2 s per point outside model steps.
MEASURED = {128: (600, 77), 512: (2400, 91), 2048: (11_500, 110), 8192: (88_000, 209)}


def measured_row(prompt_tokens: int, new_tokens: int = 16) -> SweepRow:
    ttft_ms, itl_ms = MEASURED[prompt_tokens]
    wall_s = (ttft_ms + (new_tokens - 1) * itl_ms) / 1000 + 0.2
    row = ok_row(prompt_tokens, 1, wall_s=wall_s, ttft_ms=ttft_ms, itl_median_ms=itl_ms)
    return dataclasses.replace(row, new_tokens=new_tokens)


@pytest.mark.parametrize("done", [1, 2])
def test_eta_predicts_the_points_left_from_those_measured(done):
    rows = [measured_row(p) for p in list(MEASURED)[:done]]
    left = [(p, 1) for p in list(MEASURED)[done:]]
    truth = sum(measured_row(p).wall_s for p, _ in left)
    assert sweep.eta_s(rows, left, 16, SMOLLM2) == pytest.approx(truth, rel=0.15)


def test_the_old_time_per_position_rule_was_far_off():
    """What the page said before: time per token position so far x positions left (+35 % here,
    and worse where decode steps dominate the first points)."""
    rows, left = [measured_row(128)], [(512, 1), (2048, 1), (8192, 1)]
    truth = sum(measured_row(p).wall_s for p, _ in left)
    per_position = rows[0].wall_s / (128 + 16)
    assert per_position * sum(p + 16 for p, _ in left) > 1.3 * truth


def test_eta_parts():
    work = sweep.ModelWork(params=1000, attention_width=10)
    assert work.prefill_flops(100, 2) == 2 * (2 * 1000 * 100 + 2 * 10 * 100 ** 2)
    assert sweep.fit_nonnegative_slope([1, 2, 3], [5, 4, 3]) == (4.0, 0.0)  # never faster with more cache
    assert sweep.fit_nonnegative_slope([1, 3], [2, 4]) == pytest.approx((1.0, 1.0))
    assert sweep.eta_s([], [(8, 1)], 4, work) is None
    assert sweep.eta_s([measured_row(128)], [], 16, SMOLLM2) == 0


def test_model_work_reads_the_config(lm):
    work = sweep.model_work(lm)
    assert work.params == sum(p.numel() for p in lm.model.parameters())
    assert work.attention_width == 2 * 4 * 16  # tiny llama: 2 layers x 4 heads x head_dim 16


@pytest.mark.parametrize("name, memory, preset", [
    ("NVIDIA H200", 150e9, "H200"), ("NVIDIA H100 80GB HBM3", 85e9, "H100 SXM"),
    ("NVIDIA A100-SXM4-40GB", 42e9, "A100 40GB"), ("NVIDIA L40S", 48e9, "L40S"),
    ("NVIDIA L4", 24e9, "L4"), ("NVIDIA GeForce RTX 3090", 25e9, None)])
def test_gpu_preset_from_a_cuda_device_name(name, memory, preset):
    found = sweep.gpu_preset(name, int(memory))
    assert (found and found["name"]) == preset


def test_device_facts_on_cpu(lm):
    facts = sweep.device_facts(lm)
    assert facts.memory_bytes is None and facts.kv_budget_bytes is None and facts.preset is None
    assert facts.bytes_per_token == TINY_BYTES_PER_TOKEN




