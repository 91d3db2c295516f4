"""The README's "How it is built" tree names every module of the package and every wing folder."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def built_section() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## How it is built", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```\n(.*?)```", section, re.S).group(1)


def test_the_tree_names_every_module_and_wing():
    tree = built_section()
    names = set(re.findall(r"[\w]+\.py|[\w]+/", tree))
    package = ROOT / "kvviz"
    modules = {p.name for p in package.rglob("*.py") if p.name != "__init__.py"}
    wings = {p.name + "/" for p in package.iterdir() if (p / "__init__.py").exists()}
    assert modules - names == set(), "modules missing from the README tree"
    assert wings - names == set(), "wings missing from the README tree"
