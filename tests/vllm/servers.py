"""Real vLLM servers for the tests: started from .venv-vllm (scripts/vllm_serve.sh) in their own
process groups, every wait bounded, stopped by pid (the whole group) in a finally, also when a
start fails. `start_fleet` starts several side by side, one core each, with the hash settings that
make their block hashes agree (sha256 and one PYTHONHASHSEED: vLLM's `resolve_none_hash_seed` in
v1/core/kv_cache_utils.py seeds the first block's parent hash from PYTHONHASHSEED when set)."""
from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from vllm_fake import free_port

from bench.app_server import die_with_parent

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
BLOCK_SIZE, NUM_BLOCKS = 32, 24  # 23 usable blocks of 32 tokens: three requests overflow it
START_TIMEOUT_S = float(os.environ.get("KVVIZ_VLLM_START_TIMEOUT_S", "900"))
HASH_ARGS = "--prefix-caching-hash-algo sha256"  # cryptographic: shareable across processes
HASH_SEED = "0"


def opted_out() -> bool:
    return not os.environ.get("CI") and os.environ.get("KVVIZ_SKIP_VLLM") == "1"


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, start_timeout_s: float) -> None:
    deadline = time.monotonic() + start_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vLLM exited with {proc.returncode} while starting:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail(f"vLLM did not answer /health within {start_timeout_s:.0f} s:\n{log.read_text()[-4000:]}")


def stop(proc: subprocess.Popen, term_wait_s: float = 30) -> None:
    """SIGTERM to the server's whole process group (its engine and workers too, even when the
    leader already exited), a bounded wait, then SIGKILL to the group: nothing it started outlives
    the test, and no wait here is unbounded."""
    for sig, wait_s in ((signal.SIGTERM, term_wait_s), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break  # the group is gone
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader, so a dead group reads as gone
            if not group_alive(proc.pid):
                return
            time.sleep(0.2)
    proc.poll()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def launch(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=die_with_parent)


def start_server(cmd: list[str], env: dict, log: Path, url: str, start_timeout_s: float):
    """Start `cmd` in its own process group and wait (bounded) for `url`/health; on any failure
    the group is stopped before the error propagates."""
    proc = launch(cmd, env, log)
    try:
        wait_healthy(url, proc, log, start_timeout_s)
    except BaseException:
        stop(proc, term_wait_s=5)
        raise
    return proc


def serve_env(port: int, cores: str) -> dict:
    return {**os.environ, "KVVIZ_VLLM_PORT": str(port), "KVVIZ_VLLM_EVENTS_PORT": str(free_port()),
            "KVVIZ_VLLM_REPLAY_PORT": str(free_port()), "KVVIZ_VLLM_BLOCK_SIZE": str(BLOCK_SIZE),
            "KVVIZ_VLLM_NUM_BLOCKS": str(NUM_BLOCKS), "KVVIZ_VLLM_MAX_MODEL_LEN": "512",
            "KVVIZ_VLLM_CORES": cores, "PYTHONHASHSEED": HASH_SEED,
            "KVVIZ_VLLM_EXTRA_ARGS": f"--enforce-eager {HASH_ARGS}"}


@contextmanager
def start_fleet(folder: Path, replicas: int = 2, start_timeout_s: float = START_TIMEOUT_S):
    """`replicas` servers side by side (replica i on core i % cores), started together and waited
    for with one shared deadline; every one started is stopped on the way out, whatever failed."""
    cores = os.cpu_count() or 1
    procs, urls = [], []
    try:
        for i in range(replicas):
            port = free_port()
            log = folder / f"server{i}.log"
            procs.append((launch(["bash", str(ROOT / "scripts" / "vllm_serve.sh")],
                                 serve_env(port, str(i % cores)), log), log))
            urls.append(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + start_timeout_s
        for (proc, log), url in zip(procs, urls):
            wait_healthy(url, proc, log, max(1.0, deadline - time.monotonic()))
        yield urls
    finally:
        for proc, _ in procs:
            stop(proc, term_wait_s=10)
