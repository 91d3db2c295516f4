"""The headless side of the browser benchmark: `kvviz record`'s generation, in its own process.

`python -m bench.headless_worker [MODEL]` loads the default model (or MODEL) as `kvviz record` does (torch's
own thread count, no Streamlit), then answers each line of JSON on stdin (a RunConfig's fields)
with one line of JSON on stdout: every event's step time, phase and text, and the moment (seconds
after the call began) the engine yielded it.
"""
from __future__ import annotations

import json
import sys
import time


def timed_run(lm, fields: dict) -> dict:
    """One cached-mode generation, stamped when each event arrives."""
    from kvviz.live import engine
    from kvviz.live.config import RunConfig
    cfg = RunConfig(**{**fields, "prompts": tuple(fields["prompts"])})
    start, events, stamps = time.perf_counter(), [], []
    for event in engine.generate(lm, cfg, "cached"):
        stamps.append(time.perf_counter() - start)
        events.append(event)
    return {"stamps_s": stamps, "step_ms": [e.step_ms for e in events],
            "phases": [e.phase for e in events], "texts": [e.texts[0] for e in events]}


def main() -> None:
    import torch

    from kvviz.live.config import ModelSpec
    from kvviz.live.models import load_model
    lm = load_model(ModelSpec(*sys.argv[1:2]))  # the default model unless one is named
    print(json.dumps({"ready": True, "torch_threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(timed_run(lm, json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
