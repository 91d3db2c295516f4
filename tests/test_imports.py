"""Pure modules stay pure through every import they make; kvviz.vllm needs only the trace format."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

KVVIZ = Path(__file__).resolve().parent.parent / "kvviz"
PURE = ["core.events", "core.blocks", "planner.capacity", "viz.charts", "live.frames", "engine.race",
        "live.captions", "core.units", "core.trace", "core.config", "live.charts", "planner.frames",
        "planner.charts", "sweep.charts", "app.hosted", "app.device_queue", "live.report", "live.cadence",
        "live.stylesheet", "live.words", "live.report_charts",
        "serving.charts"]
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


@pytest.mark.parametrize("path", sorted(p for p in (KVVIZ / "vllm").glob("*.py") if p.name != "panel.py"),
                         ids=lambda p: p.stem)
def test_the_vllm_reader_needs_of_the_rest_of_kvviz_only_the_trace_format_and_errors(path):
    """Its panel (Streamlit) stands on the app shell like every panel; the reader itself needs
    only the file formats (the trace's, and core.wire's refusals that quote nothing from a file)
    and errors; its request views also write CSV through viz.export, which keeps cells inert, and
    its views say which prefix never hits in core.blocks' words (the planner's sentence too).
    (Which wings every module may import: tests/test_contracts.py.)"""
    allowed = {"kvviz.core.trace", "kvviz.core.errors", "kvviz.core.wire"}
    allowed |= {"kvviz.core.blocks"} if path.stem == "views" else set()
    allowed |= {"kvviz.viz.export"} if path.stem == "request_views" else set()
    assert kvviz_modules(path) <= allowed, kvviz_modules(path)


HEAVY = ("torch", "transformers", "streamlit")
LIGHT = ("altair", "msgspec", "numpy", "pandas")  # the views' own libraries, loaded once by the parent
# One fresh interpreter for all of PURE: it loads the light libraries views may use, then forks one
# child per module, which imports it and reports which heavy roots are loaded. Preloading hides
# nothing: a heavy root a light library pulled in would show in every child. (An interpreter per
# module paid the light libraries' imports 18 times: ~25 s of the fast loop.)
PROBE = """
import json, os, sys
for light in json.loads(sys.argv[1]):
    __import__(light)
heavy = set(json.loads(sys.argv[2]))
result = {}
for name in json.loads(sys.argv[3]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            __import__("kvviz." + name)
            out = sorted(heavy & set(sys.modules))
        except BaseException as exc:
            out = ["import failed: " + repr(exc)]
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        result[name] = json.loads(pipe.read() or '["no answer"]')
    os.waitpid(pid, 0)
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def heavy_roots_loaded() -> dict[str, list[str]]:
    """kvviz.<name> -> the heavy roots importing it pulls in, followed through every import."""
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(LIGHT), json.dumps(HEAVY), json.dumps(PURE)],
                          capture_output=True, text=True, timeout=300, cwd=KVVIZ.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", PURE)
def test_pure_modules_stay_pure_through_every_import(name, heavy_roots_loaded):
    """Not only their own import lines: nothing they import may pull in torch, transformers or
    Streamlit either (a view that loads torch costs 6-10 s and ties the page to the engine)."""
    assert heavy_roots_loaded[name] == []


def test_the_purity_probe_sees_what_each_child_imports_and_only_that():
    """kvviz.core.trace imports kvviz.core.events, kvviz.core.units does not: each child reports its own
    imports, none left over from a sibling (cheap stand-ins for a heavy root)."""
    done = subprocess.run([sys.executable, "-c", PROBE, "[]", json.dumps(["kvviz.core.events"]),
                           json.dumps(["core.trace", "core.units"])],
                          capture_output=True, text=True, timeout=300, cwd=KVVIZ.parent)
    assert json.loads(done.stdout) == {"core.trace": ["kvviz.core.events"], "core.units": []}


def test_ruff_finds_no_bugs():
    """The lint of pyproject's [tool.ruff] (syntax errors, undefined names, unused imports)."""
    ruff = Path(sys.executable).with_name("ruff")
    done = subprocess.run([str(ruff), "check", "kvviz", "app_pages", "tests", "app.py", "scripts"],
                          capture_output=True, text=True, timeout=120, cwd=KVVIZ.parent)
    assert done.returncode == 0, done.stdout[-3000:]
