#!/usr/bin/env bash
# `make vllm-demo`: a real vLLM (from .venv-vllm) serving kvviz's default model with prefix caching,
# a small pool and KV events on loopback; a bounded load generator whose requests share a system
# prompt; and kvviz's dashboard on the vLLM engine page. Ctrl-C stops everything it started.
# Environment: PORT (dashboard, 8501), KVVIZ_VLLM_PORT (8000), KVVIZ_VLLM_NUM_BLOCKS (72),
# DEMO_ROUNDS (load rounds, 3), DEMO_SECONDS (stop after this long; default: run until Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-8501}"
export KVVIZ_VLLM_PORT="${KVVIZ_VLLM_PORT:-8000}"
export KVVIZ_VLLM_EXTRA_ARGS="${KVVIZ_VLLM_EXTRA_ARGS:---enforce-eager}"  # starts in ~1 min instead of ~4 (no torch.compile)
URL="http://127.0.0.1:$KVVIZ_VLLM_PORT"
RUNS="runs/vllm-demo"
mkdir -p "$RUNS"
pids=()
cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do pkill -P "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

echo "vllm-demo: starting vLLM on $URL (log: $RUNS/server.log)"
bash scripts/vllm_serve.sh > "$RUNS/server.log" 2>&1 &
pids+=($!)
.venv/bin/streamlit run app.py --server.port "$PORT" --server.headless true > "$RUNS/dashboard.log" 2>&1 &
pids+=($!)
echo "vllm-demo: dashboard at http://localhost:$PORT/engine"
for _ in $(seq 1 900); do
  if curl -fs "$URL/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "${pids[0]}" 2>/dev/null; then echo "vllm-demo: vLLM exited; see $RUNS/server.log"; tail -20 "$RUNS/server.log"; exit 1; fi
  sleep 1
done
curl -fs "$URL/health" >/dev/null || { echo "vllm-demo: vLLM did not start within 15 min"; exit 1; }
echo "vllm-demo: vLLM is up; open http://localhost:$PORT/engine (Ctrl-C stops everything)"
command -v xdg-open >/dev/null 2>&1 && [ -n "${DISPLAY:-}" ] && xdg-open "http://localhost:$PORT/engine" >/dev/null 2>&1 || true
(
  for round in $(seq 0 $(( ${DEMO_ROUNDS:-3} - 1 ))); do
    .venv/bin/python scripts/vllm_load.py --url "$URL" --requests 24 --concurrency 4 \
      --max-tokens 48 --first $(( round * 24 )) --gap-s 1.5 || true
    sleep 5
  done
) &
pids+=($!)
# `wait` (unlike a foreground sleep) returns as soon as a signal arrives, so Ctrl-C and kill stop at once.
if [ -n "${DEMO_SECONDS:-}" ]; then
  sleep "$DEMO_SECONDS" & pids+=($!); wait $!
else
  wait "${pids[2]}"; echo "vllm-demo: load done; the dashboard stays up until Ctrl-C"; wait "${pids[0]}"
fi
