"""Benchmarks that need a fresh process run one of bench's modules and read its JSON."""
from __future__ import annotations

import json
import os
import subprocess
import sys


def bench_env(**extra: str) -> dict:
    """This environment, offline, quiet, plus `extra`."""
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", **extra)


def run_json(module: str, *args: str, env: dict | None = None, what: str = "a benchmark"):
    """`python -m module args...` in a fresh process; the JSON on its last stdout line.

    RuntimeError with the end of its stderr when it fails.
    """
    done = subprocess.run([sys.executable, "-m", module, *args], env=env or bench_env(),
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
