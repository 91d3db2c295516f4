"""`python -m bench` (`make bench`): what kvviz's instrumentation and live page cost, measured side by side.

Every comparison runs its variants in one invocation, interleaved (A, B, A, B, ...), and
reports the ratio of their medians against a target; the command exits 1 when a target is
missed. With `--out` the results, the machine (read at run time) and one paragraph of method per
benchmark are written as Markdown (docs/benchmarks.md). One module per benchmark:

| module | measures |
|---|---|
| `engine_runs` | hook overhead, engine vs `model.generate`, recompute vs cached (headless) |
| `cache_map` | attention capture (eager + hooks) vs sdpa per decode step; a cache-map redraw |
| `browser_page` | the live page in Chromium against `streamlit run`, beside headless runs, at the same torch threads |
| `fast_model` | a tiny random Llama with SmolLM2's tokenizer, ~3 ms a step: the GPU's regime on this CPU (`*-fast` rows) |
| `app_server` | `streamlit run` as `make run` starts it, and Chromium's launch (also used by the browser tests) |
| `apptest_page` | the live page in Streamlit's AppTest harness (informational) |
| `load`, `soak` | default model load times; memory over many generations |
| `vllm_replay`, `vllm_streams` | the vLLM page's per-request accounting: replay growth and events a second (replay, live) |
| `results`, `machine`, `settings`, `subproc`, `command` | the table, the machine, the CLI |

    python -m bench [--quick] [--only live-browser,...] [--reps N] [--out docs/benchmarks.md]
"""
from bench.command import build_parser, run

__all__ = ["build_parser", "run"]
