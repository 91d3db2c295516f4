"""What the vLLM tests share: the real vLLM servers of a test session (two replicas, a fleet,
started once, shared by the single-server tests (replica 0) and the fleet tests (both); see
tests/vllm/servers.py), the captured fleet read once, a fake vLLM (tests/vllm_fake.py), and the
builders of small KV-event streams. The single-server capture's helpers are in tests/vllm_payloads.py."""
import os
import time
from pathlib import Path

import pytest

from kvviz.vllm import fleet
from kvviz.vllm.events import BlockRemoved, BlockStored, KVEventBatch
from kvviz.vllm.requests import RequestLedger
from kvviz.vllm.trace import Recording, states_at
from tests.vllm.servers import VENV, opted_out, start_fleet
from vllm_fake import FakeVllm

FLEET = Path(__file__).resolve().parents[1] / "data" / "vllm" / "fleet"  # tests/data/vllm/fleet/README.md
WAIT_S = 15
BS = 4  # block size of the built streams


@pytest.fixture(scope="session")
def fleet_capture():
    """The real two-replica capture: (recording, fleet view, states at its end). Read-only."""
    recording = Recording.load(FLEET / "watch.json")
    return recording, fleet.fleet_requests(recording), states_at(recording)


@pytest.fixture
def fake():
    """A fake vLLM serving the captured payloads; nothing published yet."""
    server = FakeVllm()
    yield server
    server.close()


def wait_for(predicate, timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def stored(hashes, parent, tokens, session=None, lora=None, block_size: int = BS) -> BlockStored:
    return BlockStored(block_hashes=list(hashes), parent_block_hash=parent, token_ids=list(tokens),
                       block_size=block_size, lora_id=lora, medium="GPU", lora_name=None, session_id=session)


def removed(*hashes) -> BlockRemoved:
    return BlockRemoved(block_hashes=list(hashes), medium="GPU")


def ledger_of(*steps) -> RequestLedger:
    """steps: (ts, [events]) in order."""
    ledger = RequestLedger()
    for ts, events in steps:
        ledger.apply(KVEventBatch(ts, events, 0))
    return ledger


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
