"""One vLLM KV-event publisher (one engine / DP rank) read over ZMQ: a SUB socket and a replay DEALER.

Socket roles follow vLLM's publisher: it BINDS its PUB socket only for a wildcard (`*`, `::`),
ipc:// or inproc:// endpoint and CONNECTS for a concrete address such as tcp://127.0.0.1:5557,
so kvviz binds its SUB socket there (one subscriber per engine can then listen). The replay
ROUTER is always bound by vLLM: a DEALER sends `[b"", start_seq]` and receives `[b"", topic, seq,
payload]` per buffered batch, then an end marker whose seq is -1.

Sockets are not thread-safe: a Subscriber lives and dies on the thread that opened it.
"""
from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

import zmq

from kvviz.vllm.client import EngineError, is_loopback
from kvviz.vllm.events import END_SEQ, Message, SchemaMismatch, decode_message

REPLAY_TIMEOUT_MS = 3000
MAX_DRAIN = 1000  # messages handled per receive call, so a flood cannot starve the caller


@dataclass(frozen=True)
class EventSource:
    """Where one engine's events come from, resolved against the server's host."""

    rank: int  # data-parallel rank
    sub_address: str
    sub_binds: bool  # True: kvviz binds (vLLM's PUB connects to a concrete address)
    replay_address: str | None
    topic: str = ""


def publisher_binds(endpoint: str) -> bool:
    """vLLM's own rule for its PUB socket (ZmqEventPublisher._is_bind_endpoint)."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


def on_host(endpoint: str, host: str) -> str:
    """tcp://*:5557 -> tcp://host:5557: the address to connect to a wildcard-bound socket."""
    port = endpoint.rsplit(":", 1)[-1]
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


def endpoint_host(endpoint: str) -> str:
    return urllib.parse.urlsplit(endpoint.replace("tcp://", "http://", 1)).hostname or ""


WILDCARD_HOSTS = ("", "*", "0.0.0.0", "::", "[::]")


def resolve_source(rank: str | int, settings: dict, server_host: str) -> EventSource:
    """An EventSource for `/kv_event_sources`' entry. The server's reply never decides where kvviz
    opens a socket: kvviz connects only to the server's own host (a wildcard endpoint is rewritten
    to it), binds only a concrete address (loopback for a loopback server, never a wildcard), and
    uses ipc:// only for a server on this machine. EngineError for anything else."""
    endpoint = str(settings.get("endpoint") or "")
    replay = settings.get("replay_endpoint")
    if not endpoint.startswith(("tcp://", "ipc://")):
        raise EngineError(f"rank {rank} publishes KV events at {endpoint!r}; kvviz reads tcp:// "
                          "or ipc:// endpoints (inproc:// is only visible inside vLLM)")
    check_ipc(endpoint, server_host, rank)
    binds = publisher_binds(endpoint)
    if not binds:
        check_bind_host(endpoint, server_host, rank)
    sub_address = on_host(endpoint, server_host) if binds and endpoint.startswith("tcp://") else endpoint
    return EventSource(int(rank), sub_address, not binds,
                       replay_address(str(replay), server_host, rank) if replay else None,
                       str(settings.get("topic") or ""))


def check_ipc(endpoint: str, server_host: str, rank) -> None:
    if endpoint.startswith("ipc://") and not is_loopback(server_host):
        raise EngineError(f"rank {rank} names a local socket file ({endpoint}); kvviz uses ipc:// "
                          "only for a server on this machine (a loopback URL)")


def check_bind_host(endpoint: str, server_host: str, rank) -> None:
    """vLLM connects to a concrete address, where kvviz must listen: a loopback one for a
    loopback server, and never every interface."""
    host = endpoint_host(endpoint)
    if host in WILDCARD_HOSTS:
        raise EngineError(f"rank {rank} publishes KV events to {endpoint}; kvviz does not listen on "
                          "every interface: give vLLM a concrete address of this machine")
    if is_loopback(server_host) and not is_loopback(host):
        raise EngineError(f"rank {rank} publishes KV events to {endpoint}, off this machine's "
                          f"loopback while the server is at {server_host}; kvviz listens only on "
                          "loopback for a loopback server")
    if is_loopback(host) and not is_loopback(server_host):
        raise EngineError(f"rank {rank} publishes KV events to its own loopback ({endpoint}), which "
                          "kvviz cannot reach from another machine; start vLLM with the endpoint "
                          "tcp://*:5557 (it binds) or tcp://<this machine>:5557 (kvviz binds)")


def replay_address(endpoint: str, server_host: str, rank) -> str | None:
    if endpoint.startswith("ipc://"):
        check_ipc(endpoint, server_host, rank)
        return endpoint
    if not endpoint.startswith("tcp://"):
        raise EngineError(f"rank {rank}'s replay endpoint {endpoint!r} is not tcp:// or ipc://")
    if "*" in endpoint or "::" in endpoint:
        return on_host(endpoint, server_host)
    host = endpoint_host(endpoint)
    if is_loopback(host) and not is_loopback(server_host):
        return None  # the server's own loopback: unreachable from here, so no replay
    if not (host == server_host or (is_loopback(host) and is_loopback(server_host))):
        raise EngineError(f"rank {rank}'s replay endpoint {endpoint} is on another host than the "
                          f"server ({server_host}); kvviz contacts only that host")
    return endpoint


class Subscriber:
    """The SUB socket and (optionally) the replay socket of one EventSource."""

    def __init__(self, source: EventSource, ctx: zmq.Context | None = None):
        self.source = source
        self.ctx = ctx or zmq.Context.instance()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, source.topic.encode())
        try:
            if source.sub_binds:
                self.sub.bind(source.sub_address)
            else:
                self.sub.connect(source.sub_address)
        except zmq.ZMQError as exc:
            self.sub.close(linger=0)
            raise EngineError(sub_error(source, exc)) from None

    def receive(self, timeout_ms: int) -> tuple[list[Message], list[str]]:
        """(messages, problems) waiting now, after at most `timeout_ms` for the first: a message
        that does not decode becomes a problem (SchemaMismatch's text) and the others still count."""
        out: list[Message] = []
        problems: list[str] = []
        if not self.sub.poll(timeout_ms):
            return out, problems
        while len(out) + len(problems) < MAX_DRAIN and self.sub.poll(0):
            try:
                out.append(decode_message(self.sub.recv_multipart()))
            except SchemaMismatch as exc:
                problems.append(str(exc))
        return out, problems

    def replay(self, start_seq: int, timeout_ms: int = REPLAY_TIMEOUT_MS) -> tuple[list[Message], list[str]]:
        """(batches from `start_seq` on, problems) — nothing without a replay endpoint; a batch that
        does not decode is a problem and the rest still count. EngineError on a timeout."""
        if not self.source.replay_address:
            return [], []
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        try:
            dealer.connect(self.source.replay_address)
            dealer.send_multipart([b"", start_seq.to_bytes(8, "big")])
            return read_replay(dealer, timeout_ms, self.source.replay_address)
        finally:
            dealer.close(linger=0)

    def close(self) -> None:
        self.sub.close(linger=0)


def read_replay(dealer: zmq.Socket, timeout_ms: int, address: str) -> tuple[list[Message], list[str]]:
    out: list[Message] = []
    problems: list[str] = []
    while True:
        if not dealer.poll(timeout_ms):
            raise EngineError(f"the replay endpoint {address} did not answer within "
                              f"{timeout_ms / 1000:g} s")
        frames = dealer.recv_multipart()
        try:
            if len(frames) != 4:
                raise SchemaMismatch(f"a replayed message has {len(frames)} frames, expected 4")
            if int.from_bytes(frames[2], "big", signed=True) == END_SEQ:
                return out, problems
            out.append(decode_message(frames[1:]))
        except SchemaMismatch as exc:
            problems.append(str(exc))


def sub_error(source: EventSource, exc: zmq.ZMQError) -> str:
    if source.sub_binds and exc.errno == zmq.EADDRINUSE:
        return (f"cannot listen at {source.sub_address}: the address is in use. vLLM's publisher "
                "connects to one address, so only one subscriber can listen there (another kvviz "
                "page or `kvviz watch` may hold it)")
    if source.sub_binds:
        return (f"cannot listen at {source.sub_address} ({exc}); vLLM's publisher connects there, "
                "so it must be an address of this machine")
    return f"cannot subscribe to {source.sub_address}: {exc}"
