#!/usr/bin/env bash
# Checks kvviz's CUDA paths (CUDA-event timings, allocator counters, bytes == formula, greedy
# parity, the decode step against the memory-bandwidth floor, the live page in Chromium against
# headless on CUDA) on a GPU machine and records example traces under ${1:-runs}/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" scripts/gpu_check.py --out "${1:-runs}" "${@:2}"  # e.g. scripts/gpu_check.sh runs --no-page
