"""Watch vLLM servers live: a background thread subscribes to each server's KV events, replays
what it missed, scrapes `/metrics`, and keeps the engine states and a `Recording` up to date.

One `EngineWatch` per set of URLs (a fleet: every replica in one recording, named r0, r1, … in
the order given), optionally tailing a client's request log (`kvviz.vllm.request_log`). The thread owns the ZMQ sockets; readers take `lock` (or call
`read`) to look at `states`, `notes` and `status`. Nothing here raises into the caller: every
problem becomes a note and a status line, and the thread retries where that makes sense
(unreachable server, restart). `kvviz watch` and the Engine page both use this class.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kvviz.vllm import client
from kvviz.vllm.events import Message
from kvviz.vllm.metrics import NotVllmMetrics, parse_metrics
from kvviz.vllm.trace import BatchRecord, NoteRecord, Recording, ReplyRecord, ScrapeRecord
from kvviz.vllm.request_log import LogTail, RequestLogError
from kvviz.vllm.state import EngineState, apply_batch, apply_reply, apply_scrape, state_for
from kvviz.vllm.subscriber import Subscriber, resolve_source

RETRY_S = 2.0  # between attempts to reach a server that did not answer
MAX_BATCHES = 200_000  # a live page keeps at most this many batches for its download
TRIM_SLACK = MAX_BATCHES // 8  # records kept beyond the cap before the oldest are cut in one go
LOG_EVERY_S = 0.5  # between two reads of the request log


@dataclass(kw_only=True)
class Connection:
    """One server: its info once discovered, and a subscriber per DP rank."""

    url: str
    info: client.ServerInfo | None = None
    subscribers: list[Subscriber] = field(default_factory=list)
    status: str = "connecting…"
    ok: bool = False
    retry_at: float = 0.0
    next_scrape: float = 0.0


class EngineWatch:
    def __init__(self, urls: list[str], scrape_every_s: float = 1.0, timeout_s: float = client.TIMEOUT_S,
                 request_log: str | None = None):
        self.urls = [client.normalize_url(u) for u in urls]
        self.log = LogTail(request_log) if request_log else None
        self.next_log = 0.0
        self.num_log_skipped = 0  # request log lines naming a server not watched here
        self.scrape_every_s = scrape_every_s
        self.timeout_s = timeout_s
        self.lock = threading.Lock()
        self.states: dict[str, EngineState] = {}
        self.recording = Recording({"kind": "vllm watch", "urls": self.urls,
                                    "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                    "replicas": {u: f"r{i}" for i, u in enumerate(self.urls)}})
        self.connections = [Connection(url=u) for u in self.urls]
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- for readers ----------------------------------------------------------------------------
    def start(self) -> EngineWatch:
        self._thread = threading.Thread(target=self.run, name="kvviz-vllm-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def read(self, fn: Callable):
        """fn(states, connections) under the lock (build frames here, not charts)."""
        with self.lock:
            return fn(self.states, self.connections)

    def now_s(self) -> float:
        return time.monotonic() - self.t0

    # --- the thread -----------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self._stop.is_set():
                busy = False
                for conn in self.connections:
                    busy |= self.step(conn)
                self.read_log()
                if not busy:
                    self._stop.wait(0.05)
        finally:
            self.read_log(force=True)
            for conn in self.connections:
                self.disconnect(conn)

    def step(self, conn: Connection) -> bool:
        """One round for one server; True if it did some work."""
        now = time.monotonic()
        if conn.info is None:
            if now >= conn.retry_at:
                self.connect(conn)
            return False
        busy = any([self.receive(conn, sub) for sub in list(conn.subscribers)])
        if now >= conn.next_scrape:
            conn.next_scrape = now + self.scrape_every_s
            self.scrape(conn)
        return busy

    def read_log(self, force: bool = False) -> None:
        """The request log's new lines, every LOG_EVERY_S (a bad line: a note, and the log is
        no longer read)."""
        if self.log is None or (time.monotonic() < self.next_log and not force):
            return
        self.next_log = time.monotonic() + LOG_EVERY_S
        try:
            replies = self.log.read_new()
        except RequestLogError as exc:
            self.note(self.log.path, f"request log: {exc}; it is no longer read")
            self.log = None
            return
        for reply in replies:
            try:
                reply.url = client.normalize_url(reply.url)
            except client.EngineError:
                pass  # kept as written: it names no watched server
            if reply.url not in self.urls:
                self.num_log_skipped += 1  # another server's request (a page watches each alone)
                continue
            with self.lock:
                apply_reply(self.states, reply)
                self.recording.replies.append(ReplyRecord(round(self.now_s(), 3), reply))
                trim(self.recording.replies)

    def connect(self, conn: Connection) -> None:
        try:
            info = client.server_info(conn.url, self.timeout_s)
            host = client.url_host(conn.url)
            sources = [resolve_source(rank, s, host) for rank, s in sorted(info.sources.items())]
            conn.subscribers = open_all(sources)
        except client.EngineError as exc:
            self.fail(conn, str(exc))
            return
        conn.info = info
        with self.lock:
            self.recording.meta.setdefault("servers", {})[conn.url] = {
                "version": info.version, "model": info.model, "model_root": info.model_root,
                "sources": info.sources}
        ranks = ", ".join(str(s.source.rank) for s in conn.subscribers)
        self.set_status(conn, f"vLLM {info.version} · {info.model} · DP rank(s) {ranks}", ok=True)
        for sub in conn.subscribers:
            self.fill(conn, sub, 0)

    def fail(self, conn: Connection, text: str) -> None:
        self.disconnect(conn)
        conn.retry_at = time.monotonic() + RETRY_S
        self.set_status(conn, text + f" (retrying every {RETRY_S:g} s)", ok=False)

    def disconnect(self, conn: Connection) -> None:
        for sub in conn.subscribers:
            sub.close()
        conn.subscribers, conn.info = [], None

    def set_status(self, conn: Connection, text: str, ok: bool) -> None:
        if text != conn.status:
            self.note(conn.url, text)
        conn.status, conn.ok = text, ok

    def note(self, url: str, text: str) -> None:
        with self.lock:
            self.recording.notes.append(NoteRecord(round(self.now_s(), 3), url, text))
            del self.recording.notes[:-1000]

    def receive(self, conn: Connection, sub: Subscriber) -> bool:
        messages, problems = sub.receive(0)
        for problem in problems[-1:]:  # one note per round is enough to say what is wrong
            self.note(conn.url, f"rank {sub.source.rank}: {problem}")
            conn.status, conn.ok = problem, False
        for message in messages:
            self.deliver(conn, sub, message)
        return bool(messages or problems)

    def deliver(self, conn: Connection, sub: Subscriber, message: Message) -> None:
        """Apply a live message, first replaying what was missed (a gap, or a restart)."""
        rank = sub.source.rank
        with self.lock:
            pool = state_for(self.states, conn.url, rank).pool
            last, last_ts = pool.last_seq, pool.last_ts
        if last is None and message.seq > 0:
            self.fill(conn, sub, 0)
        elif last is not None and message.seq > last + 1:
            self.fill(conn, sub, last + 1)
        elif last is not None and message.seq <= last and message.batch.ts > last_ts:
            self.note(conn.url, f"rank {rank}: event sequence restarted at {message.seq} "
                                "(the server restarted): the cache picture starts over")
            if message.seq > 0:
                self.fill(conn, sub, 0)
        self.record(conn.url, rank, message)

    def fill(self, conn: Connection, sub: Subscriber, start_seq: int) -> None:
        try:
            missed, problems = sub.replay(start_seq, int(self.timeout_s * 1000))
        except client.EngineError as exc:
            self.note(conn.url, f"rank {sub.source.rank}: could not replay missed events: {exc}")
            return
        if problems:
            self.note(conn.url, f"rank {sub.source.rank}: {len(problems)} replayed batch(es) skipped: "
                                f"{problems[-1]}")
        if missed and start_seq == 0 and missed[0].seq > 0:
            self.note(conn.url, f"rank {sub.source.rank}: the server's replay buffer starts at "
                                f"batch {missed[0].seq}; blocks stored before are not shown")
        for message in missed:
            self.record(conn.url, sub.source.rank, message)

    def record(self, url: str, rank: int, message: Message) -> None:
        with self.lock:
            apply_batch(self.states, url, rank, message.seq, message.batch)
            self.recording.batches.append(
                BatchRecord(round(self.now_s(), 3), url, rank, message.seq, message.batch))
            trim(self.recording.batches)

    def scrape(self, conn: Connection) -> None:
        try:
            engines = parse_metrics(client.get_text(conn.url, "/metrics", self.timeout_s))
        except client.EngineUnreachable as exc:
            self.fail(conn, f"{exc}; the server may have stopped or be restarting")
            return
        except (client.EngineError, NotVllmMetrics) as exc:
            self.fail(conn, str(exc))
            return
        with self.lock:
            t_s = round(self.now_s(), 3)
            apply_scrape(self.states, conn.url, engines, t_s)
            self.recording.scrapes.append(ScrapeRecord(t_s, conn.url, engines))
            trim(self.recording.scrapes)


def trim(records: list) -> None:
    """Keep the newest MAX_BATCHES records, cutting in chunks so each append stays O(1)."""
    if len(records) > MAX_BATCHES + TRIM_SLACK:
        del records[:-MAX_BATCHES]


def open_all(sources) -> list[Subscriber]:
    """A Subscriber per source; on a failure the ones opened are closed again."""
    opened: list[Subscriber] = []
    try:
        for source in sources:
            opened.append(Subscriber(source))
    except client.EngineError:
        for sub in opened:
            sub.close()
        raise
    return opened
