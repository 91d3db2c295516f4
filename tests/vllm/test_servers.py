"""The real-server harness (tests/vllm/servers.py) leaves nothing behind, even when the test
process is killed outright and its finally never runs."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KILLED_PARENT = """
import os, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
from tests.vllm import servers
proc = servers.launch(["sleep", "60"], dict(os.environ), servers.Path(sys.argv[2]))
print(proc.pid, flush=True)
os._exit(0)  # as pytest-timeout or a kill ends a test process: no finally
"""


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_server_dies_with_the_process_that_started_it(tmp_path):
    out = subprocess.run([sys.executable, "-c", KILLED_PARENT, str(ROOT), str(tmp_path / "log")],
                         capture_output=True, text=True, timeout=60, check=True)
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)
    try:
        assert not alive(pid), "the launched process outlived the process that started it"
    finally:
        if alive(pid):
            os.kill(pid, 9)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"  # a zombie is gone, waiting to be reaped
    except FileNotFoundError:
        return False
