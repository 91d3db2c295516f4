"""The server's full garbage collections stay short (kvviz.app.collector): once its first model is
loaded, what the process holds for good is out of the collector's sight, and a model dropped later
still gives its memory back."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvviz.app import collector
from tiny import save_tiny

ROOT = Path(__file__).resolve().parents[2]

FIRST_LOAD = """
import gc, json, sys, weakref, torch
from kvviz.app import collector, ui
from kvviz.core.config import LoadConfig
before = gc.get_freeze_count()
other = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))  # frozen with the rest
lm = ui.load_in_turn(ui.model_store(), LoadConfig(name=sys.argv[1]))
frozen, tracked = gc.get_freeze_count(), len(gc.get_objects())
alive = weakref.ref(other), weakref.ref(other[0].weight)
del other  # no collection after this: reference counting alone must free it
print(json.dumps({"loaded": lm is not None, "before": before, "frozen": frozen, "tracked": tracked,
                  "again": collector.freeze_long_lived("model"), "dropped": [ref() is None for ref in alive]}))
"""


def python(code: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a fresh interpreter imports Streamlit, torch and transformers (~15 s)
def test_the_first_model_load_leaves_the_collector_only_what_came_after(tmp_path):
    seen = python(FIRST_LOAD, str(save_tiny(tmp_path / "tiny")))
    assert seen["loaded"] and seen["before"] == 0
    assert seen["frozen"] > 100_000  # the modules torch, transformers and Streamlit brought
    assert seen["tracked"] < seen["frozen"] / 20  # what a full collection still examines
    assert seen["again"] is False  # once per process
    assert seen["dropped"] == [True, True]  # a model dropped later still gives its memory back


def test_the_freeze_happens_once_in_this_process_too():
    """Whichever test loaded a model through the page first froze this worker: later calls do nothing."""
    import gc
    collector.freeze_long_lived("model")
    frozen = gc.get_freeze_count()
    assert frozen > 0 and collector.freeze_long_lived("model") is False and gc.get_freeze_count() == frozen
