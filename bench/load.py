"""Seconds to load the default model in a fresh process: first conversion, then warm loads."""
from __future__ import annotations

import json
import statistics
import tempfile
import time

from bench.results import Result, spread
from bench.settings import Settings
from bench.subproc import bench_env, run_json


def load_in_subprocess(cache_dir: str | None) -> dict:
    """Seconds a fresh Python process spends importing, converting and loading the default model."""
    env = bench_env(**({"KVVIZ_CACHE_DIR": cache_dir} if cache_dir is not None else {}))
    start = time.perf_counter()
    timings = run_json("bench.load", env=env, what="loading the default model")
    return {**timings, "process_s": time.perf_counter() - start}


def model_load(s: Settings) -> tuple[list[Result], str]:
    with tempfile.TemporaryDirectory(prefix="kvviz-bench-") as fresh:
        cold = load_in_subprocess(fresh) if s.cold_load else None
        warm = [load_in_subprocess(fresh if s.cold_load else None) for _ in range(s.load_reps)]
    warm_s = statistics.median(w["load_s"] for w in warm)
    rows = [Result("Default model warm load / 5 s budget", f"{warm_s:.2f} s", "5 s", warm_s / 5.0,
                   "<=", 1.0)]
    if cold is not None:
        first_s = cold["convert_s"] + cold["load_s"]
        rows.append(Result("Default model first run (conversion + load) / warm load",
                           f"{first_s:.1f} s", f"{warm_s:.2f} s", first_s / warm_s, None, None))
    cold_note = (f"First run (fresh temporary `KVVIZ_CACHE_DIR`): conversion {cold['convert_s']:.1f} s "
                 f"+ load {cold['load_s']:.2f} s, whole process {cold['process_s']:.1f} s. "
                 if cold else "The first conversion is skipped with `--quick`. ")
    return rows, (
        "Each load runs in a fresh Python subprocess (so nothing is warm in memory) that imports "
        "kvviz, calls `convert_default_model()` and then `load_model(LoadConfig())`, which includes "
        "the model check, tokenizer, weights and one warm-up forward pass. The first run converts "
        "the embedded GGUF into a fresh temporary cache folder; the warm runs reuse that folder "
        f"({s.load_reps} of them, median). The target is on `load_model` alone; the Python and torch "
        "imports are reported beside it. " + cold_note +
        "Warm: load " + spread([w["load_s"] for w in warm]) + " s; imports "
        + spread([w["import_s"] for w in warm]) + " s; whole process "
        + spread([w["process_s"] for w in warm]) + " s.")


def load_timings() -> dict:
    """The subprocess side: import kvviz, convert the default model if needed, load it."""
    start = time.perf_counter()
    from kvviz.engine import models
    from kvviz.core.config import LoadConfig
    imported = time.perf_counter()
    models.convert_default_model()
    converted = time.perf_counter()
    models.load_model(LoadConfig())
    loaded = time.perf_counter()
    return {"import_s": imported - start, "convert_s": converted - imported, "load_s": loaded - converted}


if __name__ == "__main__":  # `python -m bench.load`
    print(json.dumps(load_timings()))
