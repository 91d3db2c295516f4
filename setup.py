"""What the kvviz wheel holds and where each part comes from; the rest of the packaging is in
pyproject.toml.

The code: every package under kvviz/, and the reports' templates (kvviz/templates/). The files kvviz ships beside its code live at the top level,
in assets/, and install inside the package as kvviz/assets/ (kvviz.core.assets finds either); every
file under assets/ ships. setup.py because pyproject.toml's setuptools table cannot both find the
packages and add one that lives in another folder.
"""
from setuptools import find_namespace_packages, find_packages, setup

ASSETS = ["kvviz.assets", *(f"kvviz.assets.{name}" for name in find_namespace_packages(where="assets"))]

setup(
    packages=[*find_packages(include=["kvviz", "kvviz.*"]), "kvviz.templates", *ASSETS],
    package_dir={"kvviz.assets": "assets"},
    package_data={"kvviz.templates": ["*.j2"], **{name: ["*"] for name in ASSETS}},
)
