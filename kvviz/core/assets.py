"""Where the files kvviz ships beside its code are: the example traces, the model and GPU catalogs,
the prompt presets, the explainer and glossary, the favicon, the Shrink task and its sweep. Pure;
stdlib only.

In a checkout (`streamlit run app.py`, `make run`, the tests, an editable install) they are the
top-level `assets/` folder beside the `kvviz/` package; an installed wheel carries the same files
inside the package, as `kvviz/assets/` (setup.py maps the one onto the other). `FOLDER` is the
folder found when kvviz was imported; every reader and writer of a shipped file builds its path
from it.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # the kvviz/ folder this module was imported from


def folder(package: Path = PACKAGE) -> Path:
    """The shipped files' folder: a checkout's `assets/` (beside `package`, with the checkout's
    pyproject.toml, so that a stray `assets/` in site-packages is never taken for it), else the
    installed copy inside `package`."""
    checkout = package.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "assets").is_dir():
        return checkout / "assets"
    return package / "assets"


FOLDER = folder()
TRACES = FOLDER / "traces"  # the example traces the Replay page offers (and the Live tour reads)
