"""Talking to a vLLM server over HTTP (kvviz.vllm.client): URLs normalized or refused, every failure
a sentence, and what a server says about itself (the captured answers of tests/data/vllm, served
by tests/vllm_fake.py)."""
import pytest

from kvviz.vllm import client
from kvviz.vllm.client import EngineError, normalize_url
from vllm_fake import FakeVllm, free_port
from vllm_payloads import json_file


@pytest.mark.parametrize("url, expected", [
    ("localhost:8000/", "http://localhost:8000"), (" http://127.0.0.1:8000 ", "http://127.0.0.1:8000"),
    ("https://vllm.example:443/base/", "https://vllm.example:443/base")])
def test_urls_are_normalized(url, expected):
    assert normalize_url(url) == expected


@pytest.mark.parametrize("url", ["", "ftp://host", "http://", "http://h:99999", "http://u:p@h:1",
                                 "http://h:1/?q=1"])
def test_bad_urls_are_refused_with_a_message(url):
    with pytest.raises(EngineError):
        normalize_url(url)


def test_get_text_names_timeouts_and_refusals():
    with pytest.raises(client.EngineUnreachable, match="refused"):
        client.get_text(f"http://127.0.0.1:{free_port()}", "/metrics", 1.0)


def test_a_url_urllib_refuses_is_said_in_kvviz_words():
    """urllib's ValueError ("Invalid IPv6 URL") becomes a UserError in kvviz's own sentence."""
    with pytest.raises(client.EngineUnreachable, match="not a URL urllib can open") as info:
        client.get_text("http://[::1", "/metrics", 1.0)
    assert "IPv6" not in str(info.value)


def test_server_descriptions_captured():
    assert json_file("version.json") == {"version": "0.32.0"}
    assert json_file("kv_event_sources.json")["0"]["endpoint"] == "tcp://127.0.0.1:5557"
    assert json_file("models.json")["data"][0]["id"] == "SmolLM2-135M-Instruct"


def test_server_info_reads_version_model_and_the_event_publishers(fake):
    info = client.server_info(fake.url, 2.0)
    model = json_file("models.json")["data"][0]
    assert (info.url, info.version, info.model, info.model_root) == (fake.url, "0.32.0", model["id"], model["root"])
    assert list(info.sources) == ["0"]
    assert info.sources["0"]["endpoint"] == f"tcp://127.0.0.1:{fake.pub_port}"


def test_a_server_without_publishers_or_json_is_named_for_what_it_lacks():
    server = FakeVllm(routes={"/kv_event_sources": '{"0": {"publisher": "null"}}', "/metrics": "up 1"},
                      events=False)
    try:
        with pytest.raises(client.EventsDisabled, match="publishes no KV-cache events"):
            client.event_sources(server.url, 2.0)
        with pytest.raises(client.NotVllm, match="/metrics did not answer JSON"):
            client.get_json(server.url, "/metrics", 2.0)
        with pytest.raises(client.NotVllm, match="answered HTTP 404"):
            client.get_json(server.url, "/version", 2.0)
    finally:
        server.close()


@pytest.mark.parametrize("host, loopback", [("localhost", True), ("127.0.0.1", True), ("127.8.9.1", True),
                                            ("::1", True), ("10.0.0.1", False), ("gpu-node-3", False), ("", False)])
def test_only_loopback_hosts_count_as_this_machine(host, loopback):
    assert client.is_loopback(host) is loopback
