#!/usr/bin/env bash
# Serve a model with vLLM (from .venv-vllm) on loopback, with prefix caching, a small block pool
# (so evictions happen), KV-cache events over ZMQ and each response's cached-token count
# (usage.prompt_tokens_details, the oracle of kvviz's per-request accounting). Runs in the foreground; `exec` keeps the pid.
# Settings come from the environment (defaults in brackets):
#   KVVIZ_VLLM_MODEL [the embedded default model, converted once into kvviz's cache folder]
#   KVVIZ_VLLM_PORT [8000] KVVIZ_VLLM_EVENTS_PORT [5557] KVVIZ_VLLM_REPLAY_PORT [5558]
#   KVVIZ_VLLM_BLOCK_SIZE [32] KVVIZ_VLLM_NUM_BLOCKS [72] KVVIZ_VLLM_MAX_MODEL_LEN [2048] KVVIZ_VLLM_KV_GIB [1]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${KVVIZ_VLLM_VENV:-.venv-vllm}"
MODEL="${KVVIZ_VLLM_MODEL:-$(.venv/bin/python -c 'from kvviz.engine.models import convert_default_model; print(convert_default_model())')}"
PORT="${KVVIZ_VLLM_PORT:-8000}"
EVENTS="tcp://127.0.0.1:${KVVIZ_VLLM_EVENTS_PORT:-5557}"
REPLAY="tcp://127.0.0.1:${KVVIZ_VLLM_REPLAY_PORT:-5558}"
CORES="${KVVIZ_VLLM_CORES:-0-$(( $(nproc) - 1 ))}"
export HF_HUB_OFFLINE=1 VLLM_SERVER_DEV_MODE=1 VLLM_NO_USAGE_STATS=1
export VLLM_CPU_KVCACHE_SPACE="${KVVIZ_VLLM_KV_GIB:-1}" VLLM_CPU_OMP_THREADS_BIND="$CORES"
export VLLM_CPU_NUM_OF_RESERVED_CPU=0
export VLLM_CACHE_ROOT="${VLLM_CACHE_ROOT:-$HOME/.cache/kvviz/vllm-cache}"
exec "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
  --model "$MODEL" --served-model-name "${KVVIZ_VLLM_SERVED_NAME:-SmolLM2-135M-Instruct}" \
  --host 127.0.0.1 --port "$PORT" --dtype float32 \
  --max-model-len "${KVVIZ_VLLM_MAX_MODEL_LEN:-2048}" --enable-prefix-caching \
  --block-size "${KVVIZ_VLLM_BLOCK_SIZE:-32}" --num-gpu-blocks-override "${KVVIZ_VLLM_NUM_BLOCKS:-72}" \
  --enable-prompt-tokens-details \
  --kv-events-config "{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":\"$EVENTS\",\"replay_endpoint\":\"$REPLAY\"}" \
  ${KVVIZ_VLLM_EXTRA_ARGS:-}
