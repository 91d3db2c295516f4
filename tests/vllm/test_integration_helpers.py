"""The vLLM integration test's start/stop helpers, on fake servers that never become healthy:
a failed start ends quickly and leaves no process behind (the real server test is slow and rare)."""
import os
import time

import pytest

from tests.vllm.servers import group_alive, start_server, stop
from vllm_fake import free_port

pytestmark = pytest.mark.slow  # starts and stops server processes: make test, not make check


def fake_server(tmp_path, script: str):
    pid_file = tmp_path / "pid"
    cmd = ["bash", "-c", f"echo $$ > {pid_file}; {script}"]
    return cmd, pid_file


def wait_for(path, timeout_s=10):
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return int(path.read_text())


@pytest.mark.parametrize("script", [
    "sleep 300 & sleep 300 & wait",  # alive, never healthy, with a child in its group
    "trap '' TERM; sleep 300 & wait",  # ignores SIGTERM: killed
])
def test_a_start_that_never_gets_healthy_fails_fast_and_stops_its_group(tmp_path, script):
    cmd, pid_file = fake_server(tmp_path, script)
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="did not answer /health within 2 s"):
        start_server(cmd, dict(os.environ), tmp_path / "log", f"http://127.0.0.1:{free_port()}", 2)
    pgid = wait_for(pid_file)
    assert time.monotonic() - started < 20  # 2 s of waiting, 5 s of SIGTERM grace, then SIGKILL
    assert not group_alive(pgid)  # the leader and its sleeping children are gone


def test_a_server_that_exits_while_starting_fails_at_once(tmp_path):
    cmd, pid_file = fake_server(tmp_path, "echo boom; exit 3")
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="exited with 3(.|\n)*boom"):
        start_server(cmd, dict(os.environ), tmp_path / "log", f"http://127.0.0.1:{free_port()}", 60)
    assert time.monotonic() - started < 10 and not group_alive(wait_for(pid_file))


def test_stop_ends_a_group_whose_leader_already_exited(tmp_path):
    import subprocess
    proc = subprocess.Popen(["bash", "-c", "sleep 300 & exit 0"], start_new_session=True)
    proc.wait(10)
    assert group_alive(proc.pid)  # the orphaned sleep still holds the group
    started = time.monotonic()
    stop(proc, term_wait_s=5)
    assert not group_alive(proc.pid) and time.monotonic() - started < 10
