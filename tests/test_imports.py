"""Pure modules stay pure through every import they make; kvviz.vllm needs only the trace format."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

KVVIZ = Path(__file__).resolve().parent.parent / "kvviz"
PURE = ["live.events", "cache.blocks", "planner.capacity", "viz.charts", "live.frames", "live.race",
        "live.captions", "viz.units", "live.trace", "live.config", "live.live_charts", "planner.planner_frames",
        "planner.planner_charts", "sweep.sweep_charts", "app.hosted", "app.device_queue", "report",
        "serving.serving_charts"]
def module_path(name: str) -> Path:
    return KVVIZ / (name.replace(".", "/") + ".py")


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def kvviz_modules(path: Path) -> set[str]:
    """Absolute kvviz modules a file imports, its own package's excluded."""
    mods = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kvviz"):
            mods.add(node.module)
        elif isinstance(node, ast.Import):
            mods |= {a.name for a in node.names if a.name.startswith("kvviz")}
    return {m for m in mods if not m.startswith("kvviz.vllm")}


@pytest.mark.parametrize("path", sorted((KVVIZ / "vllm").glob("*.py")), ids=lambda p: p.stem)
def test_the_vllm_reader_needs_of_the_rest_of_kvviz_only_the_trace_format_and_errors(path):
    """(Which wings and libraries every module may import at all: tests/test_contracts.py.)"""
    assert kvviz_modules(path) <= {"kvviz.live.trace", "kvviz.errors"}, kvviz_modules(path)


def modules_loaded_by(name: str) -> set[str]:
    """The heavy roots importing kvviz.<name> pulls in, followed through every import (a fresh
    interpreter, so what the test process already loaded does not hide anything)."""
    code = (f"import sys, kvviz.{name}; "
            "print(','.join(sorted({'torch', 'transformers', 'streamlit'} & set(sys.modules))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=KVVIZ.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return {m for m in done.stdout.strip().split(",") if m}


@pytest.mark.parametrize("name", PURE)
def test_pure_modules_stay_pure_through_every_import(name):
    """Not only their own import lines: nothing they import may pull in torch, transformers or
    Streamlit either (a view that loads torch costs 6-10 s and ties the page to the engine)."""
    assert modules_loaded_by(name) == set()


def test_ruff_finds_no_bugs():
    """The lint of pyproject's [tool.ruff] (syntax errors, undefined names, unused imports)."""
    ruff = Path(sys.executable).with_name("ruff")
    done = subprocess.run([str(ruff), "check", "kvviz", "app_pages", "tests", "app.py", "scripts"],
                          capture_output=True, text=True, timeout=120, cwd=KVVIZ.parent)
    assert done.returncode == 0, done.stdout[-3000:]
