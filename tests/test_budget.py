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
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    long(why): allowed past the budget\n    xdist_group\n")
    env = {**os.environ, "KVVIZ_LONG_TEST_S": "0.3"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "-rf", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "1 failed, 2 passed" in run.stdout, run.stdout + run.stderr
    assert "test_slow_without_a_reason took" in run.stdout and "past the suite's budget" in run.stdout
