import ast
import functools
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))  # bench/ (the benchmarks live outside the package)
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may be downloaded, ever
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def worker_torch_threads(cores: int, workers: int) -> int:
    """Torch threads for one test process: its share of the cores. Torch's default (one thread per
    core) in each of two xdist workers on two cores made the workers' OpenMP threads wait on each
    other: the Shrink protocol, model-type and Shrink compute modules took 161 s of wall and 273 s
    of CPU on 2 workers with torch's default, 94 s and 149 s with 1 thread each (2026-12-07)."""
    return max(1, cores // max(1, workers))


def pytest_configure(config):
    import torch
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    torch.set_num_threads(worker_torch_threads(os.cpu_count() or 1, workers))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny Llama saved as a local model folder."""
    from tiny import save_tiny
    return save_tiny(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def default_lm():
    """The real embedded default model (converted once into the user cache)."""
    from kvviz.core.config import LoadConfig
    from kvviz.engine.models import load_model
    return load_model(LoadConfig())


# ---------------------------------------------------------------- one feature's tests
# Every test is marked with each kvviz layer or feature its module imports (core, engine, viz,
# app, live, planner, sweep, serving, shrink, vllm), so `pytest -m planner` runs the planner's
# tests and `pytest -m "shrink and not slow"` the fast ones of the Shrink page.
WINGS = ("core", "engine", "viz", "app", "live", "planner", "sweep", "serving", "shrink", "vllm")


@functools.lru_cache(maxsize=None)
def wings_imported(path: str) -> frozenset[str]:
    """The kvviz wings a test file imports anywhere in it (`from kvviz.x import y`, `from kvviz import x`)."""
    found = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kvviz"):
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "kvviz" else [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found |= {n.split(".")[1] for n in names if n.startswith("kvviz.") and n.split(".")[1] in WINGS}
    return frozenset(found)


def pytest_itemcollected(item):
    """Each test is marked with the wings its module imports."""
    for wing in wings_imported(str(item.path)):
        item.add_marker(wing)


# ---------------------------------------------------------------- two workers, one server each
# `make test` runs the suite on two pytest-xdist workers. A worker takes a whole unit at a time:
# a test module (its module fixtures are paid once), all of tests/browser/ (its session's Streamlit
# servers and Chromium start once), and every test that starts a real vLLM ("vllm-real": the
# session's two servers, the demo and the engine builds, never two at once). xdist's own
# --dist loadgroup cannot do this on pytest 9 (it renames node ids through an attribute pytest 9 no
# longer reads), so the unit is decided here, from the node id the controller sees.
REAL_VLLM_MODULES = ("tests/vllm/test_integration.py", "tests/scripts/test_vllm_demo.py",
                     "tests/planner/test_vllm_hybrid.py", "tests/planner/test_vllm_sliding.py",
                     "tests/planner/test_will_start.py")


def work_unit(nodeid: str) -> str:
    """The unit of work an xdist worker takes whole, from a test's node id."""
    module = nodeid.split("::", 1)[0]
    if module in REAL_VLLM_MODULES:
        return "vllm-real"
    if module.startswith("tests/browser/"):
        return "browser"
    return module


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: unknown under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SharedServerScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # the units go out in collection order (below)
    return SharedServerScheduling(config, log)


FIRST_UNIT = "browser"  # the longest unit (~18 of the suite's ~40 worker-minutes): it starts at once


def pytest_collection_modifyitems(config, items):
    """Units in the order a worker takes them: the browser unit first, then the rest by number of
    tests (xdist's own reorder). xdist's order had put two big modules ahead of it, and the
    browser unit then ran past every other, alone at the end of the suite."""
    units: dict[str, list] = {}
    for item in items:
        units.setdefault(work_unit(item.nodeid), []).append(item)
    order = sorted(units, key=lambda unit: (unit != FIRST_UNIT, -len(units[unit])))
    items[:] = [item for unit in order for item in units[unit]]


# ---------------------------------------------------------------- the suite's budget
# The suite must fit 20 minutes on a quiet 2-core machine. A test whose own run (its call; shared
# fixtures it happens to start first are not its cost) passes LONG_TEST_S fails, unless it carries
# `@pytest.mark.long("why it cannot be cheaper")`. On a
# loaded machine (CI's) the limit stretches with the load average over the cores; a limit given in
# KVVIZ_LONG_TEST_S is taken as it is.
LONG_TEST_S = 60.0


def long_limit_s() -> float:
    if "KVVIZ_LONG_TEST_S" in os.environ:
        return float(os.environ["KVVIZ_LONG_TEST_S"])
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return LONG_TEST_S * max(1.0, load)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.passed or item.get_closest_marker("long"):
        return
    spent, limit = call.duration, long_limit_s()
    if spent > limit:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} took {spent:.0f} s, past the suite's budget of "
                           f"{limit:.0f} s per test: make it cheaper, or mark it "
                           f"@pytest.mark.long(\"why\") and say why")
