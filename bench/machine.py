"""The machine the numbers come from, read at run time, and how far to trust them."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def machine_facts(lm, load_at_start: str) -> dict:
    """Cores, load, versions and (when a benchmark loaded it here) the model, read now."""
    from importlib.metadata import version

    import torch
    import transformers
    facts = {"CPU": f"{cpu_model()}, {os.cpu_count()} cores; torch threads here {torch.get_num_threads()}",
             "Software": f"Python {platform.python_version()}, torch {torch.__version__}, "
                         f"transformers {transformers.__version__}, streamlit {version('streamlit')}, "
                         f"playwright {version('playwright')}, {chromium_version()}",
             "Load average at start (1, 5, 15 min)": load_at_start,
             "Load average at end": ", ".join(f"{x:.1f}" for x in os.getloadavg())}
    if lm is not None:
        from kvviz.engine import loop as engine
        from bench.engine_runs import bench_config
        cfg = bench_config(1)
        prompt_tokens = engine.encode_prompts(lm.tokenizer, cfg, lm.device).prompt_len
        facts["Model"] = f"{lm.label}, {lm.device.type}, {str(lm.dtype).removeprefix('torch.')}, greedy"
        facts["Prompt"] = f"{cfg.prompts[0]!r} in the chat template: {prompt_tokens} tokens"
    return facts


def chromium_version(path: str = "/usr/bin/chromium") -> str:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        return done.stdout.strip() or "chromium (version unknown)"
    except (OSError, subprocess.TimeoutExpired):
        return "no chromium"


def caveats(start_load: float, end_load: float) -> str:
    """How far to trust the numbers, given how busy the machine was."""
    cores = os.cpu_count() or 1
    return (
        f"The 1-minute load average was {start_load:.1f} at the start and {end_load:.1f} at the end, "
        f"on {cores} cores: anything near or above {cores} means other processes were competing for "
        "the CPU during the measurements (on the kvviz development machine these are other "
        "sessions' test suites, Streamlit servers and headless browsers). Torch splits every "
        "forward pass across its threads and waits for the slowest, so one competing busy process "
        "can stretch a step several times over. Interleaving puts both variants of a pair "
        "under the same conditions and medians drop the worst rounds, but a few-percent target "
        "such as the hook overhead is at the edge of what a busy machine can resolve; `--threads 1` "
        "trades absolute speed for steadier ratios. Rerun `make bench` on an idle machine before "
        "reading much into a difference of a percent or two.")


def cpu_busy_fraction(window_s: float) -> float:
    """The share of all cores' time spent busy over the next `window_s` seconds (/proc/stat)."""
    def read() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]  # all, idle + iowait
    total0, idle0 = read()
    time.sleep(window_s)
    total1, idle1 = read()
    return 1 - (idle1 - idle0) / max(total1 - total0, 1)


def wait_until_quiet(busy_below: float = 0.15, window_s: float = 0.5, max_s: float = 8.0) -> float:
    """Wait until the cores are mostly idle for a window (a finished page's browser and server can
    go on drawing for a second or two), at most `max_s`; the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < max_s and cpu_busy_fraction(window_s) >= busy_below:
        pass
    return time.monotonic() - started
