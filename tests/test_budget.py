"""The suite's budget guard (tests/conftest.py): a test past the per-test limit fails unless marked long."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

SLEEPERS = '''
import time
import pytest

def test_quick():
    pass

def test_slow_without_a_reason():
    time.sleep(0.6)

@pytest.mark.long("sleeps on purpose")
def test_slow_with_a_reason():
    time.sleep(0.6)
'''


def test_a_test_past_the_limit_fails_unless_marked_long(tmp_path):
    shutil.copy(Path(__file__).parent / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_sleepers.py").write_text(SLEEPERS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    long(why): allowed past the budget\n")
    env = {**os.environ, "KVVIZ_LONG_TEST_S": "0.3"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "-rf", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "1 failed, 2 passed" in run.stdout, run.stdout + run.stderr
    assert "test_slow_without_a_reason took" in run.stdout and "past the suite's budget" in run.stdout


def test_a_worker_takes_the_tests_that_share_a_server_whole():
    """make test's two xdist workers: one unit per module, one for tests/browser/ (its session's
    servers), one for the tests that start a real vLLM (tests/conftest.py's scheduler)."""
    from conftest import work_unit
    assert work_unit("tests/browser/test_live.py::test_a") == work_unit("tests/browser/test_pages.py::b[1]") == "browser"
    assert work_unit("tests/vllm/test_integration.py::a") == work_unit("tests/scripts/test_vllm_demo.py::b") == "vllm-real"
    assert work_unit("tests/core/test_blocks.py::a[x::y]") == "tests/core/test_blocks.py"


def test_each_worker_takes_its_share_of_the_cores_for_torch():
    """Two workers on two cores: one torch thread each, not two each waiting on the other's."""
    import torch
    from conftest import worker_torch_threads
    assert worker_torch_threads(2, 2) == 1 and worker_torch_threads(16, 2) == 8
    assert worker_torch_threads(1, 2) == 1 and worker_torch_threads(2, 1) == 2
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    assert torch.get_num_threads() == worker_torch_threads(os.cpu_count() or 1, workers)
