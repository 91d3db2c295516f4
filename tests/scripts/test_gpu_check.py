"""scripts/gpu_check.py's checks that can run without a GPU, and MPS clock reads that wait for
the device. (No CUDA or MPS machine was available when these were written: the CUDA paths run
under `make gpu-check`.)"""
import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kvviz.engine import loop as engine
from kvviz.engine import hooks
from kvviz.core.config import RunConfig
from kvviz.core.meta import RunMeta

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


META = RunMeta(batch=2, max_len=100, bytes_per_token=1000)


def test_reservation_is_batch_times_max_len_times_bytes_per_token():
    assert META.reserved_bytes == 200_000


def test_static_reservation_check_can_fail(gpu_check):
    problems = gpu_check.static_reservation_problems
    assert problems(META, [200_000] * 3, 200_000 + 4096) == []
    assert problems(META, [200_000, 200_000], None) == []  # no allocator off CUDA
    grew = problems(META, [40_000, 42_000], None)  # a cache that grows per token
    assert grew and "not the 200,000 B reserved" in grew[0]
    assert "allocator grew by 50,000 B" in problems(META, [200_000], 50_000)[0]
    assert "allocator grew by 9,000,000 B" in problems(META, [200_000], 9_000_000)[0]
    assert problems(META, [], None)  # no events is no evidence


@pytest.mark.slow
def test_a_static_run_on_cpu_passes_and_a_dynamic_one_fails(gpu_check):
    from tiny import tiny_lm
    lm, cfg = tiny_lm(), RunConfig(max_new_tokens=4, stop_on_eos=False)
    static = replace(cfg, cache_backend="static")
    meta = engine.run_meta(lm, static)
    assert gpu_check.static_reservation_problems(meta, [e.kv_bytes for e in engine.generate(lm, static)], None) == []
    dynamic = [e.kv_bytes for e in engine.generate(lm, cfg)]
    assert gpu_check.static_reservation_problems(engine.run_meta(lm, cfg), dynamic, None)


def test_mps_clock_reads_wait_for_the_device(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append("sync"))
    monkeypatch.setattr(engine.time, "perf_counter", lambda: calls.append("clock") or 1.0)
    with engine.StepClock(torch.device("mps")):
        calls.append("step")
    assert calls == ["sync", "clock", "step", "sync", "clock"]
    assert hooks.device_sync(torch.device("cpu")) is None and hooks.device_sync(torch.device("cuda")) is None


def test_mps_layer_marks_wait_for_the_device(monkeypatch):
    calls = []
    timer = hooks.LayerTimer(1, False, lambda: calls.append("sync"))
    monkeypatch.setattr(hooks.time, "perf_counter", lambda: calls.append("clock") or 2.0)
    timer.mark(timer.starts, 0)
    timer.mark(timer.ends, 0)
    assert calls == ["sync", "clock", "sync", "clock"] and timer.take_ms() == [0.0]
