"""How much `python -m bench` measures: the full run and the quick smoke test."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    """How much to measure; `QUICK` is a smoke test of a few minutes."""

    reps: int = 5  # interleaved repetitions of each A/B pair
    new_tokens: int = 64  # per run, for hooks, engine vs generate and the live page
    recompute_lengths: tuple[int, ...] = (32, 64, 128)  # new tokens, recompute vs cached
    recompute_reps: int = 3  # rounds of every length in both modes (minutes on CPU); --reps caps it
    cold_load: bool = True  # convert the default model into a fresh cache folder (≈ 40 s)
    load_reps: int = 3  # warm loads, each in a fresh subprocess
    soak_runs: int = 30  # consecutive live-page generations in one process
    browser_reps: int = 7  # rounds of the live page in Chromium (each: race off and on, headless off and on)
    fast_tokens: int = 512  # new tokens per run on the fast model (bench.fast_model): ~3 ms each
    fast_browser_reps: int = 11  # its rounds: short runs (≈ 30 s a round), so more of them: its race row
    # is a ratio of two ratios of ~5 ms steps, and 5 rounds read it anywhere in 0.94–1.25
    suite_vllm: bool = True  # the suite-load benchmark includes the vLLM server and visitors tests


FULL = Settings()
QUICK = Settings(reps=3, new_tokens=16, recompute_lengths=(8, 16, 32), recompute_reps=1,
                 cold_load=False, load_reps=1, soak_runs=8, browser_reps=2, suite_vllm=False,
                 fast_tokens=256, fast_browser_reps=2)
