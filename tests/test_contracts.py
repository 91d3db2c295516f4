"""The house rules, on every import statement of kvviz/ (inside functions too), as an import
contract would state them: which wing may import which, and where Streamlit, torch and
transformers may appear. A rule broken here is a design change: change the rule on purpose."""
import ast
import sys
from pathlib import Path

import pytest

KVVIZ = Path(__file__).resolve().parent.parent / "kvviz"

# The layers, lowest first: a file may import its own wing and the layers below its own.
# core: the run's contract (specs, layout, settings, events, trace, errors, units); engine: all
# that runs a model; viz: chart theme and builders; app: the Streamlit shell every panel stands on
# (sidebar, cached model, device queue, hosted policy, links, slots); the features, which never
# import one another; kvviz/cli.py, the one command that dispatches to every feature's cli.
FEATURES = {"live", "replay", "planner", "sweep", "serving", "shrink", "vllm"}
MAY_IMPORT = {
    "core": set(),
    "engine": {"core"},
    "viz": {"core"},
    "app": {"core", "engine", "viz"},
    **{feature: {"core", "engine", "viz", "app"} for feature in FEATURES},
    "cli": {"core", "engine", "viz", "app"} | FEATURES,
}
# Crossings between features that the house still has, each to be moved down into core or engine
# (none left: the last, shrink's report reusing the run report's page, moved into viz/report_page.py).
CROSSINGS: dict[str, set[str]] = {}
# Heavy roots and the files that may import them; nowhere else.
ONLY_IN = {
    "streamlit": lambda f: f.startswith("app/") or f.endswith(("/panel.py", "_panel.py")),  # tests/test_shape.py
    "torch": lambda f: f.split("/")[0] in {"engine", "planner", "sweep", "serving", "shrink"}
                       or f == "app/threads.py",
    "transformers": lambda f: f.split("/")[0] in {"engine", "planner", "serving", "shrink"} or f == "core/layout.py",
    "playwright": lambda f: False,  # the browser drivers live in bench/ and tests/, never in the package
    "vllm": lambda f: False,  # kvviz.vllm reads a vLLM server's wire formats; it never imports vLLM
}
FILES = sorted(str(p.relative_to(KVVIZ)) for p in KVVIZ.rglob("*.py"))


def wing(rel: str) -> str:
    return rel.split("/")[0].removesuffix(".py")


def imports(rel: str) -> set[str]:
    """Absolute module names a file imports, `from kvviz import x` as kvviz.x."""
    out = set()
    for node in ast.walk(ast.parse((KVVIZ / rel).read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {f"kvviz.{a.name}" for a in node.names} if node.module == "kvviz" else {node.module}
    return out


def test_every_file_belongs_to_a_wing_with_rules():
    assert {wing(f) for f in FILES} - {"__init__"} <= set(MAY_IMPORT)


@pytest.mark.parametrize("rel", FILES)
def test_wings_import_only_the_wings_below_them(rel):
    mine = wing(rel)
    used = {m.split(".")[1] for m in imports(rel) if m.startswith("kvviz.")}
    allowed = MAY_IMPORT.get(mine, set()) | CROSSINGS.get(rel, set())
    assert used - {mine} <= allowed, f"{rel} imports {used - {mine} - allowed}"


def test_crossings_listed_are_still_there():
    """A crossing moved down is struck from CROSSINGS, so the list only ever shrinks."""
    for rel, wings in CROSSINGS.items():
        used = {m.split(".")[1] for m in imports(rel) if m.startswith("kvviz.")}
        assert wings <= used, f"{rel} no longer imports {wings - used}: strike it from CROSSINGS"


@pytest.mark.parametrize("rel", FILES)
def test_heavy_libraries_only_where_allowed(rel):
    roots = {m.split(".")[0] for m in imports(rel)}
    bad = {r for r, allowed in ONLY_IN.items() if r in roots and not allowed(rel)}
    assert not bad, f"{rel} imports {bad}"


def test_the_rules_catch_a_violation(tmp_path, monkeypatch):
    """The checks above can fail: a view module that imports the engine, or torch."""
    (tmp_path / "viz").mkdir()
    (tmp_path / "viz" / "bad.py").write_text("def f():\n    import torch\n    from kvviz.engine import loop\n")
    monkeypatch.setattr(sys.modules[__name__], "KVVIZ", tmp_path)
    with pytest.raises(AssertionError, match="engine"):
        test_wings_import_only_the_wings_below_them("viz/bad.py")
    with pytest.raises(AssertionError, match="torch"):
        test_heavy_libraries_only_where_allowed("viz/bad.py")


def test_kvviz_raises_no_bare_value_error():
    """Bad input is a UserError (kvviz.core.errors): only those reach a hosted visitor in their words."""
    found = [f"{rel}:{node.lineno}" for rel in FILES for node in ast.walk(ast.parse((KVVIZ / rel).read_text()))
             if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
             and getattr(node.exc.func, "id", None) in {"ValueError", "Exception", "RuntimeError"}]
    assert not found, found


def test_every_exception_class_is_on_the_kvviz_base():
    import importlib
    import inspect

    from kvviz.core.errors import KvvizError
    outside = []
    for rel in FILES:
        module = importlib.import_module("kvviz." + rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__"))
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, BaseException) and not issubclass(cls, KvvizError):
                outside.append(f"{rel}: {name}")
    assert not outside, outside
