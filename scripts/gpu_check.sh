#!/usr/bin/env bash
# Checks kvviz's CUDA paths (CUDA-event timings, allocator counters, bytes == formula, greedy
# parity) on a GPU machine and records example traces under ${1:-runs}/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" scripts/gpu_check.py --out "${1:-runs}"
