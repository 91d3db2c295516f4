"""The house rules, on every import statement of kvviz/ (inside functions too), as an import
contract would state them: which wing may import which, and where Streamlit, torch and
transformers may appear. A rule broken here is a design change: change the rule on purpose."""
import ast
from pathlib import Path

import pytest

KVVIZ = Path(__file__).resolve().parent.parent / "kvviz"

# Wing -> the wings it may import (besides itself). Lower wings never import higher ones.
MAY_IMPORT = {
    "errors": set(),
    "files": {"errors"},  # atomic writes; stdlib only
    "safe_input": {"errors"},
    "viz": {"errors"},
    "cache": {"errors", "viz"},
    "live": {"errors", "files", "viz", "cache"},
    # live: a pasted config's layers sized by the architecture's own code (live.config_probe), as a run measures
    "planner": {"errors", "safe_input", "viz", "cache", "live"},
    "sweep": {"errors", "viz", "cache", "live", "planner"},
    "serving": {"errors", "viz", "cache", "live"},
    "shrink": {"errors", "files", "viz", "cache", "live", "report"},  # its HTML report reuses the run report's page
    "vllm": {"errors", "live"},  # kvviz's error base and the trace format only (tests/test_imports.py)
    "report": {"errors", "viz", "cache", "live"},
    "app": {"errors", "safe_input", "viz", "cache", "live", "planner", "sweep", "serving", "shrink", "vllm",
            "report"},
    "cli": {"errors", "viz", "cache", "live", "planner", "shrink", "vllm", "report"},
}
# Heavy roots and the files that may import them; nowhere else.
ONLY_IN = {
    "streamlit": lambda f: f.startswith("app/"),
    "torch": lambda f: f.split("/")[0] in {"live", "planner", "sweep", "serving", "shrink"}
                       or f == "app/threads.py",
    "transformers": lambda f: f.split("/")[0] in {"live", "planner", "serving", "shrink"} or f == "cache/layout.py",
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
    assert used - {mine} <= MAY_IMPORT.get(mine, set()), f"{rel} imports {used - {mine} - MAY_IMPORT[mine]}"


@pytest.mark.parametrize("rel", FILES)
def test_heavy_libraries_only_where_allowed(rel):
    roots = {m.split(".")[0] for m in imports(rel)}
    bad = {r for r, allowed in ONLY_IN.items() if r in roots and not allowed(rel)}
    assert not bad, f"{rel} imports {bad}"


def test_the_rules_catch_a_violation(tmp_path, monkeypatch):
    """The checks above can fail: a view module that imports the engine, or the cache wing torch."""
    (tmp_path / "viz").mkdir()
    (tmp_path / "viz" / "bad.py").write_text("def f():\n    import torch\n    from kvviz.live import engine\n")
    monkeypatch.setattr(__import__(__name__), "KVVIZ", tmp_path)
    with pytest.raises(AssertionError, match="live"):
        test_wings_import_only_the_wings_below_them("viz/bad.py")
    with pytest.raises(AssertionError, match="torch"):
        test_heavy_libraries_only_where_allowed("viz/bad.py")


def test_kvviz_raises_no_bare_value_error():
    """Bad input is a UserError (kvviz.errors): only those reach a hosted visitor in their words."""
    found = [f"{rel}:{node.lineno}" for rel in FILES for node in ast.walk(ast.parse((KVVIZ / rel).read_text()))
             if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
             and getattr(node.exc.func, "id", None) in {"ValueError", "Exception", "RuntimeError"}]
    assert not found, found


def test_every_exception_class_is_on_the_kvviz_base():
    import importlib
    import inspect

    from kvviz.errors import KvvizError
    outside = []
    for rel in FILES:
        module = importlib.import_module("kvviz." + rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__"))
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, BaseException) and not issubclass(cls, KvvizError):
                outside.append(f"{rel}: {name}")
    assert not outside, outside
