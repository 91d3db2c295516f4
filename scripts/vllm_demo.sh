#!/usr/bin/env bash
# `make vllm-demo`: a real vLLM (from .venv-vllm) serving kvviz's default model with prefix caching,
# a small pool and KV events on loopback; a bounded load generator (first the requests designed to
# show each miss reason, then rounds of requests sharing a system prompt, all with session_ids);
# and kvviz's dashboard on the vLLM engine page, attached to this server whatever its port
# (KVVIZ_VLLM_URL, and the printed link's engine_urls). Ctrl-C stops everything it started.
# Environment: PORT (dashboard, 8501), KVVIZ_VLLM_PORT (8000), KVVIZ_VLLM_NUM_BLOCKS (72),
# DEMO_ROUNDS (load rounds, 3), DEMO_FILLERS (designed requests that overflow the pool, 14), DEMO_SECONDS (end the demo after this long; default: run until
# Ctrl-C), DEMO_LINGER_SECONDS (the dashboard stays up this long after the end, saying the demo
# ended; 30). The end stops the load first, writes "ended" (the engine page detaches), waits
# DEMO_DETACH_SECONDS (6), then stops vLLM: no request is cut by a dying server, no retry is logged.
# For tests: DEMO_RUNS (log folder), DEMO_STREAMLIT, DEMO_LOAD (the dashboard and load commands).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-8501}"
export KVVIZ_VLLM_PORT="${KVVIZ_VLLM_PORT:-8000}"
export KVVIZ_VLLM_EXTRA_ARGS="${KVVIZ_VLLM_EXTRA_ARGS:---enforce-eager}"  # starts in ~1 min instead of ~4 (no torch.compile)
URL="http://127.0.0.1:$KVVIZ_VLLM_PORT"
RUNS="${DEMO_RUNS:-runs/vllm-demo}"
STREAMLIT="${DEMO_STREAMLIT:-.venv/bin/streamlit}"
LOAD="${DEMO_LOAD:-.venv/bin/python scripts/vllm_load.py}"
mkdir -p "$RUNS"
export KVVIZ_VLLM_URL="$URL" KVVIZ_DEMO_STATE="$(cd "$RUNS" && pwd)/state"
ENGINE_PAGE="http://localhost:$PORT/engine?engine_urls=$(printf %s "$URL" | sed 's/:/%3A/g; s#/#%2F#g')"
echo "running $(date +%s)" > "$KVVIZ_DEMO_STATE"
server_pid="" dashboard_pid="" load_pid="" sleep_pid="" ended=""

stop() {  # TERM each pid's children, then the pid, then wait for all of them
  local pid kids all="" _
  for pid in "$@"; do
    kids=$(pgrep -P "$pid" 2>/dev/null || true)
    kill "$pid" 2>/dev/null || true
    [ -n "$kids" ] && kill $kids 2>/dev/null || true
    all="$all $kids"
  done
  for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
  # The children of a subshell (the load's) are not ours to `wait` for: poll until each has
  # exited (a zombie counts as exited), at most 10 s, so "ended" is written after the load is gone.
  for _ in $(seq 100); do
    alive_children $all || break
    sleep 0.1
  done
}

alive_children() {  # true while any of these pids runs (not a zombie)
  local pid
  for pid in "$@"; do
    ps -o stat= -p "$pid" 2>/dev/null | grep -qv '^Z' && return 0
  done
  return 1
}

end_demo() {  # load first, then the server; the dashboard says so (the engine page reads the state)
  [ -n "$ended" ] && return
  ended=1
  stop $sleep_pid $load_pid
  load_pid="" sleep_pid=""
  # "ended" before the server goes: the engine page stops watching at its next refresh (every 5 s at
  # most) instead of logging "connection refused, retrying" under "the demo has ended"
  echo "ended $(date +%s)" > "$KVVIZ_DEMO_STATE"
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    echo "vllm-demo: load stopped; the dashboard detaches; stopping vLLM in ${DEMO_DETACH_SECONDS:-6} s"
    sleep "${DEMO_DETACH_SECONDS:-6}" & sleep_pid=$!; wait $sleep_pid; sleep_pid=""
  fi
  stop $server_pid
  server_pid=""
}

cleanup() {
  trap - EXIT INT TERM
  end_demo
  stop $dashboard_pid
}
trap cleanup EXIT INT TERM

echo "vllm-demo: starting vLLM on $URL (log: $RUNS/server.log)"
bash scripts/vllm_serve.sh > "$RUNS/server.log" 2>&1 &
server_pid=$!
$STREAMLIT run app.py --server.port "$PORT" --server.headless true > "$RUNS/dashboard.log" 2>&1 &
dashboard_pid=$!
echo "vllm-demo: dashboard at $ENGINE_PAGE"
for _ in $(seq 1 900); do
  if curl -fs "$URL/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then echo "vllm-demo: vLLM exited; see $RUNS/server.log"; tail -20 "$RUNS/server.log"; exit 1; fi
  sleep 1
done
curl -fs "$URL/health" >/dev/null || { echo "vllm-demo: vLLM did not start within 15 min"; exit 1; }
echo "vllm-demo: vLLM is up; open $ENGINE_PAGE (Ctrl-C stops everything)"
command -v xdg-open >/dev/null 2>&1 && [ -n "${DISPLAY:-}" ] && xdg-open "$ENGINE_PAGE" >/dev/null 2>&1 || true
(
  # first, one request at a time, the requests built to show each miss reason on the page's table
  $LOAD --url "$URL" --designed --fillers "${DEMO_FILLERS:-14}" --requests 0 \
    --tag "demo$(printf %05d $(( $(date +%s) % 100000 )))" || true  # 5 digits: the repeat ends mid-block
  for round in $(seq 0 $(( ${DEMO_ROUNDS:-3} - 1 ))); do
    $LOAD --url "$URL" --requests 24 --concurrency 4 --max-tokens 48 --first $(( round * 24 )) --gap-s 1.5 || true
    sleep 5
  done
) &
load_pid=$!
# `wait` (unlike a foreground sleep) returns as soon as a signal arrives, so Ctrl-C and kill stop at once.
if [ -n "${DEMO_SECONDS:-}" ]; then
  sleep "$DEMO_SECONDS" & sleep_pid=$!; wait $sleep_pid
  end_demo
  echo "vllm-demo: the demo ended; the dashboard says so for ${DEMO_LINGER_SECONDS:-30} s"
  sleep "${DEMO_LINGER_SECONDS:-30}" & sleep_pid=$!; wait $sleep_pid
else
  wait "$load_pid"; load_pid=""; echo "vllm-demo: load done; the dashboard stays up until Ctrl-C"; wait "$server_pid"
fi
