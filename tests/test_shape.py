"""The feature shape, as a contract (issue 36), read from the source like the import rules
(tests/test_contracts.py):

* a wide record (a dataclass or msgspec Struct of 6 or more fields) is keyword-only, so that a
  reordered field can never shift values at a positional call site; a NamedTuple stays narrow;
* kvviz is imported under its own module names, never aliased (a newcomer who greps a name finds
  its file);
* a feature folder names its files by job, and a job lives only in its file: Streamlit in
  `panel.py` (or `<part>_panel.py`), Altair in `charts.py` (or `<part>_charts.py`), argparse in
  `cli.py`; a feature with a page has a `panel.py`;
* tests/ mirrors kvviz/: each module `kvviz/<package>/<module>.py` has its own
  `tests/<package>/test_<module>.py` that imports it (`kvviz/<module>.py`: `tests/test_<module>.py`).

Where the house still breaks a rule, the file is listed below; a listed file that stops breaking
the rule fails its test, so the lists only shrink.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KVVIZ = ROOT / "kvviz"
FEATURES = ("live", "replay", "planner", "sweep", "serving", "shrink", "vllm")
WIDE = 6  # fields from which a record must be keyword-only
JOBS = {"streamlit": "panel", "altair": "charts", "argparse": "cli"}

SOURCES = sorted([*KVVIZ.rglob("*.py"), *(ROOT / "app_pages").glob("*.py"), ROOT / "app.py"])

# --- what the house still has (each entry: a file that still breaks the rule) -------------------
POSITIONAL_RECORDS: set[str] = set()
ALIASED_IMPORTS: set[str] = set()
JOB_OUTSIDE_ITS_FILE: set[str] = set()
WITHOUT_ITS_TEST_FILE: set[str] = set()


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _name(node: ast.expr) -> str | None:
    node = node.func if isinstance(node, ast.Call) else node
    return getattr(node, "id", None) or getattr(node, "attr", None)


def _kw_only(keywords: list[ast.keyword]) -> bool:
    return any(k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value is True for k in keywords)


def record_kind(cls: ast.ClassDef) -> tuple[str | None, bool]:
    """("dataclass" | "struct" | "namedtuple" | None, keyword-only)."""
    for deco in cls.decorator_list:
        if _name(deco) == "dataclass":
            return "dataclass", isinstance(deco, ast.Call) and _kw_only(deco.keywords)
    for base in cls.bases:
        if _name(base) == "Struct":
            return "struct", _kw_only(cls.keywords)
        if _name(base) == "NamedTuple":
            return "namedtuple", False
    return None, False


def field_count(cls: ast.ClassDef) -> int:
    return sum(isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
               and "ClassVar" not in ast.unparse(s.annotation) for s in cls.body)


def positional_records(path: Path) -> list[str]:
    """Records of WIDE or more fields that can be built by position."""
    found = []
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.ClassDef):
            kind, kw_only = record_kind(node)
            if kind and not kw_only and field_count(node) >= WIDE:
                found.append(f"{node.name} ({kind}, {field_count(node)} fields)")
    return found


def aliased_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kvviz"):
            found += [f"from {node.module} import {a.name} as {a.asname}" for a in node.names
                      if a.asname and a.asname != a.name]
        elif isinstance(node, ast.Import):
            found += [f"import {a.name} as {a.asname}" for a in node.names if a.name.startswith("kvviz") and a.asname]
    return found


def jobs_outside_their_file(path: Path, package: Path = KVVIZ) -> list[str]:
    """In a feature folder: a job's library imported outside the file named for the job."""
    if not path.is_relative_to(package):
        return []
    parts = path.relative_to(package).parts
    if len(parts) != 2 or parts[0] not in FEATURES:
        return []
    roots = set()
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    stem = path.stem
    return [f"imports {lib} outside {job}.py" for lib, job in JOBS.items()
            if lib in roots and stem != job and not stem.endswith(f"_{job}")]


def mirror_of(path: Path, root: Path = ROOT) -> Path:
    """Where the tests of module `path` (under root/kvviz) live: tests/<package>/test_<module>.py."""
    parts = path.relative_to(root / "kvviz").parts
    return root.joinpath("tests", *parts[:-1], f"test_{parts[-1]}")


def missing_test_file(path: Path, root: Path = ROOT) -> list[str]:
    """A kvviz module without its own test file, or whose test file never imports it."""
    if not path.is_relative_to(root / "kvviz") or path.name == "__init__.py":
        return []
    tests = mirror_of(path, root)
    if not tests.exists():
        return [f"no {tests.relative_to(root)}"]
    module = ".".join(path.relative_to(root).with_suffix("").parts)
    package, name = module.rsplit(".", 1)
    found = any(m == module or m.startswith(module + ".") for m in imported(tests)) or any(
        isinstance(node, ast.ImportFrom) and node.module == package and name in {a.name for a in node.names}
        for node in ast.walk(tree(tests)))
    return [] if found else [f"{tests.relative_to(root)} does not import {module}"]


RULES = {"positional": (positional_records, POSITIONAL_RECORDS),
         "aliased": (aliased_imports, ALIASED_IMPORTS),
         "job": (jobs_outside_their_file, JOB_OUTSIDE_ITS_FILE),
         "mirrored": (missing_test_file, WITHOUT_ITS_TEST_FILE)}


@pytest.mark.parametrize("rule", RULES)
def test_the_shape_holds_outside_the_listed_files(rule):
    find, listed = RULES[rule]
    broken = {rel(p): found for p in SOURCES if (found := find(p)) and rel(p) not in listed}
    assert not broken, broken


@pytest.mark.parametrize("rule", RULES)
def test_listed_files_still_break_the_rule(rule):
    find, listed = RULES[rule]
    mended = sorted(f for f in listed if not (ROOT / f).exists() or not find(ROOT / f))
    assert not mended, f"{mended} now keep the rule: strike them from the list"


def test_every_feature_with_a_page_has_its_panel():
    pages = {p.stem for p in (ROOT / "app_pages").glob("*.py")}
    with_streamlit = {f for f in FEATURES if (KVVIZ / f).is_dir()
                      and any("streamlit" in {n.split(".")[0] for n in imported(p)} for p in (KVVIZ / f).glob("*.py"))}
    assert pages and all((KVVIZ / f / "panel.py").exists() for f in with_streamlit), with_streamlit


def imported(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_the_rules_catch_a_violation(tmp_path):
    """Each check finds what it exists to find."""
    bad = tmp_path / "bad.py"
    bad.write_text("from dataclasses import dataclass\nfrom kvviz.engine import loop as engine\n"
                   "@dataclass(frozen=True)\nclass R:\n" + "".join(f"    f{i}: int\n" for i in range(WIDE)))
    assert positional_records(bad) == [f"R (dataclass, {WIDE} fields)"]
    assert aliased_imports(bad) == ["from kvviz.engine import loop as engine"]
    bad.write_text(bad.read_text().replace("frozen=True", "frozen=True, kw_only=True"))
    assert positional_records(bad) == []
    (tmp_path / "live").mkdir()
    for name in ("frames.py", "charts.py", "cache_map_charts.py"):
        (tmp_path / "live" / name).write_text("import altair as alt\nimport argparse\n")
    assert jobs_outside_their_file(tmp_path / "live" / "frames.py", tmp_path) == [
        "imports altair outside charts.py", "imports argparse outside cli.py"]
    assert jobs_outside_their_file(tmp_path / "live" / "cache_map_charts.py", tmp_path) == [
        "imports argparse outside cli.py"]
    (tmp_path / "kvviz" / "core").mkdir(parents=True)
    (tmp_path / "tests" / "core").mkdir(parents=True)
    module = tmp_path / "kvviz" / "core" / "units.py"
    module.write_text("X = 1\n")
    assert missing_test_file(module, tmp_path) == ["no tests/core/test_units.py"]
    (tmp_path / "tests" / "core" / "test_units.py").write_text("from kvviz.core import blocks\n")
    assert missing_test_file(module, tmp_path) == ["tests/core/test_units.py does not import kvviz.core.units"]
    for line in ("from kvviz.core import blocks, units\n", "from kvviz.core.units import X\n", "import kvviz.core.units\n"):
        (tmp_path / "tests" / "core" / "test_units.py").write_text(line)
        assert missing_test_file(module, tmp_path) == [], line
