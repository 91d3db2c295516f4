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
