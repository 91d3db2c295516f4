"""A stand-in vLLM for the reader tests: HTTP endpoints answering captured payloads, and a
publisher that plays captured ZMQ messages the way vLLM's ZmqEventPublisher does (PUB connecting
to a concrete endpoint, ROUTER bound for replay). Only the transport is fake; the bytes are real."""
import http.server
import json
import socket
import threading
import time

import zmq

from vllm_payloads import frames, json_file, metrics_text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeVllm:
    def __init__(self, routes: dict | None = None, events: bool = True):
        self.http_port, self.pub_port, self.replay_port = free_port(), free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.http_port}"
        sources = {"0": {**json_file("kv_event_sources.json")["0"],
                         "endpoint": f"tcp://127.0.0.1:{self.pub_port}",
                         "replay_endpoint": f"tcp://127.0.0.1:{self.replay_port}"}} if events else {}
        self.routes = routes if routes is not None else {
            "/version": json.dumps(json_file("version.json")), "/v1/models": json.dumps(json_file("models.json")),
            "/kv_event_sources": json.dumps(sources), "/metrics": metrics_text("after_load")}
        self.buffer: list[tuple[int, bytes]] = []
        self.ctx = zmq.Context()
        self.stop = threading.Event()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.http_port), self.handler())
        self.threads = [threading.Thread(target=self.httpd.serve_forever, daemon=True)]
        if events:
            self.pub = self.ctx.socket(zmq.PUB)
            self.pub.connect(f"tcp://127.0.0.1:{self.pub_port}")  # vLLM connects to a concrete address
            self.router = self.ctx.socket(zmq.ROUTER)
            self.router.bind(f"tcp://127.0.0.1:{self.replay_port}")
            self.threads.append(threading.Thread(target=self.serve_replay, daemon=True))
        self.lock = threading.Lock()
        for t in self.threads:
            t.start()

    def handler(self):
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = fake.routes.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.end_headers()
                self.wfile.write((body or "not found").encode())

            def log_message(self, *args):
                pass
        return Handler

    def publish(self, seq: int, payload: bytes) -> None:
        """Like vLLM: keep it for replay, then send [topic, seq, payload]."""
        with self.lock:
            self.buffer.append((seq, payload))
            self.pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])

    def publish_captured(self, upto: int | None = None, gap_s: float = 0.002) -> int:
        captured = frames()[:upto]
        for f in captured:
            self.publish(int.from_bytes(f[1], "big"), f[2])
            time.sleep(gap_s)
        return len(captured)

    def serve_replay(self) -> None:
        while not self.stop.is_set():
            if not self.router.poll(50):
                continue
            client, _, start = self.router.recv_multipart()
            with self.lock:
                for seq, payload in self.buffer:
                    if seq >= int.from_bytes(start, "big"):
                        self.router.send_multipart([client, b"", b"", seq.to_bytes(8, "big"), payload])
                self.router.send_multipart([client, b"", b"", (-1).to_bytes(8, "big", signed=True), b""])

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        for t in self.threads[1:]:
            t.join(2)
        self.ctx.destroy(linger=0)
