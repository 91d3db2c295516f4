#!/usr/bin/env bash
# `make vllm-fleet-demo`: two real vLLM replicas (from .venv-vllm) on loopback, one core each, small
# pools, prefix caching, KV events, cached-token details, and the same hash settings (sha256 and
# one PYTHONHASHSEED, so a block has the same hash on both); a client playing the router sends
# scripts/vllm_fleet_load.py's designed stream (a deliberately prefix-blind order) and writes the
# request log; the dashboard's vLLM engine page watches both, with the fleet section, and downloads
# one watch file of both servers and the log (Replay plays it). No `kvviz watch` runs beside the
# page: vLLM's event publisher connects to ONE subscriber, which binds the endpoint.
# Environment: PORT (dashboard, 8501), FLEET_PORT (first replica's port, 8100; the second is +1),
# KVVIZ_VLLM_NUM_BLOCKS (24), DEMO_RUNS (runs/vllm-fleet-demo).
# Every wait is bounded; Ctrl-C (or the end of the watch, then Ctrl-C) stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-8501}"
FIRST="${FLEET_PORT:-8100}"
RUNS="${DEMO_RUNS:-runs/vllm-fleet-demo}"
mkdir -p "$RUNS"
LOG="$(cd "$RUNS" && pwd)/requests.jsonl"
: > "$LOG"
URLS=("http://127.0.0.1:$FIRST" "http://127.0.0.1:$((FIRST + 1))")
pids=()

cleanup() {  # each process group we started: TERM, a bounded wait, then KILL
  trap - EXIT INT TERM
  local pid _
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for _ in $(seq 100); do
    local alive=""
    for pid in "${pids[@]}"; do kill -0 -- "-$pid" 2>/dev/null && alive=1; done
    [ -z "$alive" ] && return
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

for i in 0 1; do
  echo "vllm-fleet-demo: starting replica r$i on ${URLS[$i]} (log: $RUNS/server$i.log)"
  setsid env PYTHONHASHSEED=0 KVVIZ_VLLM_PORT=$((FIRST + i)) KVVIZ_VLLM_EVENTS_PORT=$((FIRST + 10 + i)) \
    KVVIZ_VLLM_REPLAY_PORT=$((FIRST + 20 + i)) KVVIZ_VLLM_CORES="$((i % $(nproc)))" \
    KVVIZ_VLLM_NUM_BLOCKS="${KVVIZ_VLLM_NUM_BLOCKS:-24}" KVVIZ_VLLM_MAX_MODEL_LEN=512 \
    KVVIZ_VLLM_EXTRA_ARGS="--enforce-eager --prefix-caching-hash-algo sha256" \
    bash scripts/vllm_serve.sh > "$RUNS/server$i.log" 2>&1 &
  pids+=($!)
done
KVVIZ_VLLM_URL="$(printf '%s\n%s' "${URLS[@]}")" KVVIZ_VLLM_REQUEST_LOG="$LOG" \
  setsid .venv/bin/streamlit run app.py --server.port "$PORT" --server.headless true > "$RUNS/dashboard.log" 2>&1 &
pids+=($!)
for url in "${URLS[@]}"; do
  for _ in $(seq 1 900); do
    curl -fs "$url/health" >/dev/null 2>&1 && break
    sleep 1
  done
  curl -fs "$url/health" >/dev/null || { echo "vllm-fleet-demo: $url did not start within 15 min; see $RUNS"; exit 1; }
done
echo "vllm-fleet-demo: both replicas are up; the dashboard: http://localhost:$PORT/engine"
.venv/bin/python scripts/vllm_fleet_load.py --url "${URLS[0]}" --url "${URLS[1]}" --log "$LOG" --reset
echo "vllm-fleet-demo: the stream is sent; the page's fleet section shows it (its download: one watch"
echo "vllm-fleet-demo: file of both servers and the log, for Replay). Ctrl-C stops everything."
wait
