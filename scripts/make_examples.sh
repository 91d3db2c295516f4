#!/usr/bin/env bash
# Re-record the examples shipped in assets/traces/ on the embedded default model (CPU, fp32,
# greedy; each answer stops at the end of its turn). One torch thread: on a shared 2-core machine two
# threads gave 1-9 s spikes in the recorded step times. Run on a quiet machine; takes about 2 minutes.
#
#   scripts/make_examples.sh            (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
out=assets/traces
export OMP_NUM_THREADS=1
# Replay's Live example: a short factual question the 135M model answers right, both runs.
.venv/bin/kvviz record --prompt "Why is the sky blue?" --recompute --device cpu --dtype float32 \
    --max-new-tokens 64 --out "$out/smollm2-135m-cpu-fp32.json"
# Replay's Shrink examples, on the Shrink page's default prompt: SnapKV at 0.5 (its scores choose
# which older positions stay; the answer is unchanged) and the page's default demo, StreamingLLM at
# 0.75 (kvviz.shrink.compute.DEMO_MODE: the year is evicted and the answer changes).
.venv/bin/kvviz shrink --press SnapKV --ratio 0.5 --out "$out/smollm2-135m-shrink-snapkv.json"
.venv/bin/kvviz shrink --press StreamingLLM --ratio 0.75 --out "$out/smollm2-135m-shrink-streamingllm.json"
