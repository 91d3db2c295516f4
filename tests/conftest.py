import ast
import functools
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))  # bench/ (the benchmarks live outside the package)
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may be downloaded, ever
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny Llama saved as a local model folder."""
    from tiny import save_tiny
    return save_tiny(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def default_lm():
    """The real embedded default model (converted once into the user cache)."""
    from kvviz.core.config import ModelSpec
    from kvviz.engine.models import load_model
    return load_model(ModelSpec())


# ---------------------------------------------------------------- one feature's tests
# Every test is marked with each kvviz layer or feature its module imports (core, engine, viz,
# app, live, planner, sweep, serving, shrink, vllm), so `pytest -m planner` runs the planner's
# tests and `pytest -m "shrink and not slow"` the fast ones of the Shrink page.
WINGS = ("core", "engine", "viz", "app", "live", "planner", "sweep", "serving", "shrink", "vllm")


@functools.lru_cache(maxsize=None)
def wings_imported(path: str) -> frozenset[str]:
    """The kvviz wings a test file imports anywhere in it (`from kvviz.x import y`, `from kvviz import x`)."""
    found = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kvviz"):
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "kvviz" else [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found |= {n.split(".")[1] for n in names if n.startswith("kvviz.") and n.split(".")[1] in WINGS}
    return frozenset(found)


def pytest_collection_modifyitems(items):
    for item in items:
        for wing in wings_imported(str(item.path)):
            item.add_marker(wing)
