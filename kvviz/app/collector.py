"""Keeps the garbage collector's full passes short in the dashboard's server. Stdlib only.

Streamlit runs a full collection after every script run (its `runner.postScriptGC`), and Python
starts one by itself now and then. A full pass examines every container object the interpreter
tracks: with Streamlit, torch and transformers imported and a model loaded, about half a million,
0.2-0.5 s on 2 cores, holding the interpreter. Every click waited for one after its script ended
(a run's last text reached the screen, then the page stayed busy for it), and one that Python
starts during a run stops the model's thread and the drawing alike.

Nearly all of those objects live as long as the process: the modules the server imports, and
what the first model load imports (torch._dynamo and its kin, about 225,000 objects).
`freeze_long_lived` collects, then moves what is left out of the collector's sight (`gc.freeze`):
once after the first script run's imports (a page without a model, e.g. Replay, reruns at every
step it plays) and once after the first model load. Frozen objects are still freed by reference
counting: a model dropped later gives its memory back (tests/app/test_collector.py). Cyclic
garbage among them would stay, which is why this happens at those two moments only and not at
every load: each freeze also keeps the cycles of the sessions open at that moment.
"""
from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_frozen: set[str] = set()  # the moments done


def freeze_long_lived(moment: str) -> bool:
    """Once per process and `moment` ("imports", "model"): a full collection, then everything left
    frozen. True when this call did it."""
    with _lock:
        if moment in _frozen:
            return False
        gc.collect()
        gc.freeze()
        _frozen.add(moment)
        return True
