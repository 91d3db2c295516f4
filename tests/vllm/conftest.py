"""The real vLLM servers of a test session: two replicas (a fleet) started once, shared by the
single-server tests (replica 0) and the fleet tests (both). See tests/vllm/servers.py."""
import os

import pytest

from tests.vllm.servers import VENV, opted_out, start_fleet


@pytest.fixture(scope="session")
def vllm_fleet(tmp_path_factory):
    """Base URLs of two real vLLM servers (tests/vllm/servers.py: small pools, prefix caching,
    KV events, cached-token details, hashes that agree across the two)."""
    if opted_out():
        pytest.skip("KVVIZ_SKIP_VLLM=1 (outside CI): the real-vLLM tests are skipped on request")
    given = os.environ.get("KVVIZ_VLLM_FLEET_URLS")  # while developing: servers already running,
    if given:  # started like tests/vllm/servers.py's (scripts/vllm_serve.sh, the same settings)
        yield given.split(",")
        return
    if not (VENV / ".installed").exists():
        pytest.fail(f"{VENV} is missing: `make test` creates it (scripts/vllm_install.sh)")
    with start_fleet(tmp_path_factory.mktemp("vllm-fleet")) as urls:
        yield urls


@pytest.fixture(scope="session")
def vllm_server(vllm_fleet):
    """One real vLLM server: the fleet's replica 0."""
    return vllm_fleet[0]
