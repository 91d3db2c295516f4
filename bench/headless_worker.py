"""The headless side of the browser benchmark: `kvviz record`'s generation, in its own process.

`python -m bench.headless_worker [MODEL]` loads the default model (or MODEL) as `kvviz record` does (no
Streamlit), then answers each line of JSON on stdin (`{"config": a RunConfig's fields, "race": bool}`)
with one line of JSON on stdout: every cached event's step time, phase and text, and the moment
(seconds after the call began) the engine yielded it. With `race`, the cached run takes turns with
the recompute run as the page's race has them (`kvviz.engine.race.interleave`, in one thread, no
drawing): what the race itself costs the cached run, against which the page's race is measured.

Its torch threads follow the dashboard server's policy (kvviz.app.threads: all cores but one, or
KVVIZ_TORCH_THREADS), not torch's default as `kvviz record` has them: the page-vs-headless rows
measure what the page costs the model, so both sides get the same threads. What the policy itself
costs or gains is `python -m bench --only live-threads`.
"""
from __future__ import annotations

import json
import sys
import time


def timed_run(lm, fields: dict, race: bool = False) -> dict:
    """One cached-mode generation (taking turns with a recompute run when `race`), its events
    stamped when each arrives."""
    from kvviz.core.config import RunConfig
    from kvviz.engine import loop as engine
    from kvviz.engine.race import interleave
    cfg = RunConfig(**{**fields, "prompts": tuple(fields["prompts"])})
    recompute = engine.generate(lm, cfg, "recompute") if race else None
    start, events, stamps = time.perf_counter(), [], []
    for event in interleave(engine.generate(lm, cfg, "cached"), recompute):
        if event.mode == "cached":
            stamps.append(time.perf_counter() - start)
            events.append(event)
    return {"stamps_s": stamps, "step_ms": [e.step_ms for e in events],
            "phases": [e.phase for e in events], "texts": [e.texts[0] for e in events]}


def main() -> None:
    import torch

    from kvviz.app.collector import freeze_long_lived
    from kvviz.app.threads import apply_switch_interval, apply_torch_threads
    from kvviz.core.config import LoadConfig
    from kvviz.engine.models import load_model
    torch_default = torch.get_num_threads()
    threads = apply_torch_threads()  # as the server does (kvviz.app.ui), before the model loads
    apply_switch_interval()  # as the server does too (one thread here: it changes nothing)
    lm = load_model(LoadConfig(*sys.argv[1:2]))  # the default model unless one is named
    freeze_long_lived("model")  # as the server does after its first load
    print(json.dumps({"ready": True, "torch_threads": threads, "torch_default": torch_default}), flush=True)
    for line in sys.stdin:
        if line.strip():
            request = json.loads(line)
            print(json.dumps(timed_run(lm, request["config"], request.get("race", False))), flush=True)


if __name__ == "__main__":
    main()
