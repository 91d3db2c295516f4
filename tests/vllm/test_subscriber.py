"""Where kvviz listens for a server's KV events (kvviz.vllm.subscriber): which side binds, and the
server's reply never deciding where kvviz opens a socket (only loopback or the server's own host)."""
import pytest

from kvviz.vllm.client import EngineError
from kvviz.vllm.subscriber import publisher_binds, resolve_source


def test_socket_roles_follow_vllm_s_publisher():
    assert publisher_binds("tcp://*:5557") and publisher_binds("ipc:///tmp/kv")
    assert not publisher_binds("tcp://127.0.0.1:5557")
    local = resolve_source("0", {"endpoint": "tcp://127.0.0.1:5557",
                                 "replay_endpoint": "tcp://127.0.0.1:5558"}, "127.0.0.1")
    assert local.sub_binds and local.sub_address == "tcp://127.0.0.1:5557"
    remote = resolve_source("1", {"endpoint": "tcp://*:5558", "replay_endpoint": "tcp://*:5559"}, "gpu-node-3")
    assert not remote.sub_binds and remote.sub_address == "tcp://gpu-node-3:5558"
    assert remote.replay_address == "tcp://gpu-node-3:5559" and remote.rank == 1


def test_only_loopback_and_the_server_s_host_are_contacted():
    with pytest.raises(EngineError, match="its own loopback"):
        resolve_source("0", {"endpoint": "tcp://127.0.0.1:5557"}, "gpu-node-3")
    with pytest.raises(EngineError, match="another host"):
        resolve_source("0", {"endpoint": "tcp://*:5557", "replay_endpoint": "tcp://10.9.9.9:5558"}, "gpu-node-3")


@pytest.mark.parametrize("endpoint, replay, server, message", [
    ("tcp://0.0.0.0:5557", None, "127.0.0.1", "every interface"),
    ("tcp://10.1.2.3:5557", None, "127.0.0.1", "off this machine's loopback"),
    ("ipc:///tmp/kv-events", None, "gpu-node-3", "local socket file"),
    ("tcp://*:5557", "ipc:///tmp/kv-replay", "gpu-node-3", "local socket file"),
    ("tcp://*:5557", "tcp://evil.example:5558", "gpu-node-3", "another host"),
])
def test_the_server_s_reply_never_decides_where_kvviz_opens_a_socket(endpoint, replay, server, message):
    with pytest.raises(EngineError, match=message):
        resolve_source("0", {"endpoint": endpoint, "replay_endpoint": replay}, server)


def test_a_wildcard_of_either_family_is_read_on_the_server_s_own_host():
    for endpoint in ("tcp://[2001:db8::7]:5557", "tcp://[::]:5557", "tcp://*:5557"):
        source = resolve_source("0", {"endpoint": endpoint}, "gpu-node-3")
        assert source.sub_address == "tcp://gpu-node-3:5557" and not source.sub_binds
