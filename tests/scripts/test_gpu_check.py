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


def test_the_datasheet_bandwidth_comes_from_the_memory_clock_and_bus(gpu_check):
    from types import SimpleNamespace

    h100 = SimpleNamespace(memory_clock_rate=2_619_000, memory_bus_width=5120)  # kHz, bits (H100 SXM)
    assert gpu_check.peak_bytes_per_s(h100) == pytest.approx(3.352e12, rel=1e-3)
    assert gpu_check.peak_bytes_per_s(SimpleNamespace(name="older torch")) is None


@pytest.fixture
def failures(gpu_check):
    gpu_check.FAILURES.clear()
    yield gpu_check.FAILURES
    gpu_check.FAILURES.clear()


def test_a_decode_step_below_the_memory_floor_fails(gpu_check, failures):
    floor = gpu_check.decode_floor_ms(270_000_000, 30_000_000, 3e12)  # SmolLM2 in bf16 on an H100
    assert floor == pytest.approx(0.1)
    assert gpu_check.floor_problems(12.0, floor) == []
    assert "below the memory floor" in gpu_check.floor_problems(0.05, floor)[0]


@pytest.mark.slow
def test_the_floor_check_reads_the_runs_median_step_and_cache(gpu_check, failures, monkeypatch, capsys):
    """On a CPU trace of the tiny model, with the bandwidth given: PASS at a fast device's, FAIL
    where the floor would be above the measured step (a wrong clock)."""
    from tiny import tiny_lm

    from kvviz.core.trace import Trace
    lm, cfg = tiny_lm(), RunConfig(max_new_tokens=8, stop_on_eos=False)
    trace = Trace(engine.run_meta(lm, cfg), list(engine.generate(lm, cfg)))
    monkeypatch.setattr(gpu_check.torch.cuda, "get_device_properties", lambda device: object())
    monkeypatch.setattr(gpu_check, "copy_bytes_per_s", lambda device: 3e12)
    gpu_check.check_decode_floor(lm, trace, "tiny")
    assert failures == [] and "INFO  tiny: decode step" in capsys.readouterr().out
    monkeypatch.setattr(gpu_check, "copy_bytes_per_s", lambda device: 1.0)  # 1 B/s: a floor of days
    gpu_check.check_decode_floor(lm, trace, "tiny")
    assert failures == ["tiny: decode step at or above the memory-bandwidth floor"]


def test_benchmark_rows_become_checks_and_info_lines(gpu_check, failures, capsys):
    from bench.results import Result
    rows = [Result("compute", "9 tok/s", "10 tok/s", 0.9, ">=", 0.95), Result("race", "1 ms", "1 ms", 1.0, "<=", 1.1),
            Result("click", "4 s", "3 s", 4 / 3, None, None)]
    gpu_check.report_rows(rows, "page vs headless on CUDA")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("FAIL  page vs headless on CUDA: compute  9 tok/s vs 10 tok/s: 0.900 (target ≥ 0.95)")
    assert out[1].startswith("PASS  page vs headless on CUDA: race") and out[2].startswith("INFO  ")
    assert failures == ["page vs headless on CUDA: compute"]


def test_without_chromium_the_page_comparison_says_so_and_fails_nothing(gpu_check, failures, monkeypatch, capsys,
                                                                       tmp_path):
    from bench import app_server
    monkeypatch.setattr(app_server, "CHROMIUM", tmp_path / "no-chromium")
    gpu_check.check_page_vs_headless(tmp_path, reps=1, tokens=8)
    assert "INFO  page vs headless on CUDA: not run, it needs Chromium" in capsys.readouterr().out
    assert failures == [] and not (tmp_path / "page-vs-headless.md").exists()


def test_the_page_comparison_holds_cuda_to_the_fast_engine_target_and_writes_its_rows(gpu_check, failures,
                                                                                       monkeypatch, capsys, tmp_path):
    from bench import app_server, browser_page
    from bench.results import Result
    monkeypatch.setattr(app_server, "CHROMIUM", Path(__file__))  # a file that exists: "Chromium is there"
    called = []

    def measured(settings, bench):
        called.append((settings, bench))
        return [Result("compute", "9.5 tok/s", "10 tok/s", 0.95, ">=", bench.compute_target)], "the method"
    monkeypatch.setattr(browser_page, "browser_vs_headless", measured)
    gpu_check.check_page_vs_headless(tmp_path, reps=2, tokens=32)
    (settings, bench), = called
    assert (bench.model, bench.reps, bench.tokens) == (None, 2, 32)  # the default model, on what kvviz picks
    assert bench.compute_target == browser_page.FAST_COMPUTE_TARGET < browser_page.DEFAULT_COMPUTE_TARGET
    assert "CUDA" in bench.label and (settings.browser_reps, settings.new_tokens) == (2, 32)
    assert capsys.readouterr().out.startswith("PASS  page vs headless on CUDA: compute  9.5 tok/s vs 10 tok/s")
    assert failures == [] and (tmp_path / "page-vs-headless.md").read_text().endswith("| PASS |\n\nthe method\n")


def test_a_page_comparison_that_breaks_is_one_failed_check_not_a_traceback(gpu_check, failures, monkeypatch,
                                                                          capsys, tmp_path):
    from bench import app_server, browser_page
    monkeypatch.setattr(app_server, "CHROMIUM", Path(__file__))

    def broken(settings, bench):
        raise RuntimeError("streamlit exited with 1")
    monkeypatch.setattr(browser_page, "browser_vs_headless", broken)
    gpu_check.check_page_vs_headless(tmp_path, reps=1, tokens=8)
    assert capsys.readouterr().out == "FAIL  page vs headless on CUDA: ran  RuntimeError: streamlit exited with 1\n"
    assert failures == ["page vs headless on CUDA: ran"] and not (tmp_path / "page-vs-headless.md").exists()


@pytest.mark.slow
def test_step_costs_run_the_benchs_hook_and_capture_rows_on_the_given_model(gpu_check, failures, capsys):
    """On the tiny model on CPU, a loop of 4 steps: the two rows of `make bench`, one line each,
    named with the label and checked against the bench's targets (timings this short may miss them)."""
    from tiny import tiny_lm
    gpu_check.check_step_costs(tiny_lm(), "tiny label", reps=1, tokens=4)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line[:6] in ("PASS  ", "FAIL  ") for line in lines), lines
    assert "step costs on cpu: Hook overhead: decode step, hooked / un-hooked (tiny label)" in lines[0]
    assert "step costs on cpu: Attention over the cache: decode step, eager + capture / sdpa (tiny label)" in lines[1]
    assert "(target ≤ 1.03)" in lines[0] and "(target ≤ 1.25)" in lines[1]


@pytest.mark.slow
def test_the_script_runs_as_make_gpu_check_runs_it_and_says_when_there_is_no_cuda(tmp_path):
    """From a fresh process (its own sys.path, bench beside kvviz), with every option it has: one
    FAIL line and exit status 1 without CUDA, before it writes anything (an unknown option exits 2)."""
    import os
    import subprocess
    import sys
    args = ["--out", str(tmp_path / "runs"), "--max-new-tokens", "8", "--no-page", "--page-reps", "1",
            "--page-tokens", "8"]
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert (done.returncode, done.stdout, done.stderr) == (1, "FAIL  CUDA is not available on this machine\n", "")
    assert not (tmp_path / "runs").exists()
