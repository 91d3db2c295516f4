"""A watch of vLLM engines on file: the trace kind `kvviz-vllm-watch` (docs/trace-format.md).

It holds what was received, in arrival order: every KV-event batch (decoded, with its sequence
number and the engine it came from), every `/metrics` scrape (parsed per engine), every line of a
client's request log (version 2: `kvviz.vllm.request_log`, which replica served which request and
vLLM's own cached-token count) and the notes shown to the user (disconnects, restarts). One file
holds every server watched (a fleet): each record names its server's URL and DP rank, and
`meta["replicas"]` names each URL (r0, r1, ... in the order given). Replaying it through `kvviz.vllm.state` rebuilds the
very states the live page showed. Loading is strict: anything else is a `TraceError`.
"""
from __future__ import annotations

import gc
import os
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated

import msgspec

from kvviz.core.trace import MAX_TRACE_BYTES, TraceError, write_atomic
from kvviz.core.wire import problem
from kvviz.vllm.events import KVEventBatch
from kvviz.vllm.metrics import EngineMetrics
from kvviz.vllm.request_log import Reply
from kvviz.vllm.state import EngineState, apply_batch, apply_reply, apply_scrape

FORMAT = "kvviz-vllm-watch"
VERSION = 2  # 2: `replies` (a client's request log); version 1 files read as before


WatchS = Annotated[float, msgspec.Meta(ge=0, le=1e8)]  # seconds since the watch started: 3 years
Url = Annotated[str, msgspec.Meta(max_length=500)]


class BatchRecord(msgspec.Struct):
    t_s: WatchS  # seconds since the watch started, on kvviz's clock
    url: Url
    rank: Annotated[int, msgspec.Meta(ge=0, le=4096)]
    seq: Annotated[int, msgspec.Meta(ge=-1)]
    batch: KVEventBatch


class ScrapeRecord(msgspec.Struct):
    t_s: WatchS
    url: Url
    engines: dict[Annotated[str, msgspec.Meta(max_length=100)], EngineMetrics]


class NoteRecord(msgspec.Struct):
    t_s: WatchS
    url: Url
    text: Annotated[str, msgspec.Meta(max_length=2000)]


class ReplyRecord(msgspec.Struct):
    t_s: WatchS  # when kvviz read the line
    reply: Reply


class _Doc(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    format: str
    version: int
    meta: dict
    batches: list[BatchRecord]
    scrapes: list[ScrapeRecord]
    notes: list[NoteRecord]
    replies: list[ReplyRecord] = []


@dataclass
class Recording:
    meta: dict = field(default_factory=dict)
    batches: list[BatchRecord] = field(default_factory=list)
    scrapes: list[ScrapeRecord] = field(default_factory=list)
    notes: list[NoteRecord] = field(default_factory=list)
    replies: list[ReplyRecord] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        times = [r.t_s for r in (self.batches[-1:] + self.scrapes[-1:] + self.replies[-1:])]
        return max(times, default=0.0)

    def to_json(self) -> bytes:
        doc = _Doc(format=FORMAT, version=VERSION, meta=self.meta, batches=self.batches,
                   scrapes=self.scrapes, notes=self.notes, replies=self.replies)
        return msgspec.json.encode(doc)

    def save(self, path: str | os.PathLike) -> None:
        data = self.to_json()
        if len(data) > MAX_TRACE_BYTES:
            raise TraceError(f"the watch is {len(data) // 2**20} MiB; traces are limited to "
                             f"{MAX_TRACE_BYTES // 2**20} MiB (watch for fewer seconds)")
        try:
            write_atomic(path, data)  # kvviz.core.files: old file or new one, never half
        except OSError as exc:
            raise TraceError(f"cannot write {os.fspath(path)}: {exc.strerror or exc}") from None

    @classmethod
    def from_json(cls, data: bytes | str) -> Recording:
        if len(data) > MAX_TRACE_BYTES:
            raise TraceError(f"the file is over {MAX_TRACE_BYTES // 2**20} MiB")
        head = peek_format(data)
        if head != FORMAT:
            raise TraceError(f"the file is not a kvviz vLLM watch (format {head!r})")
        try:
            doc = msgspec.json.decode(data, type=_Doc)
        except RecursionError:
            raise TraceError("the vLLM watch file is nested too deeply") from None
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise TraceError(f"the vLLM watch file is invalid: {problem(exc)}") from None
        if doc.version > VERSION:
            raise TraceError(f"this watch was written by a newer kvviz (format version {doc.version}); "
                             f"this kvviz reads version {VERSION}")
        return cls(doc.meta, doc.batches, doc.scrapes, doc.notes, doc.replies)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Recording:
        try:
            with open(path, "rb") as f:
                return cls.from_json(f.read(MAX_TRACE_BYTES + 1))
        except OSError as exc:
            raise TraceError(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from None


class _Head(msgspec.Struct):
    format: object = None


def peek_format(data: bytes | str) -> str | None:
    """The `format` field of a JSON trace, or None if it is not a JSON object with one (read
    without building the rest of the document)."""
    try:
        head = msgspec.json.decode(data, type=_Head).format
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return None
    return head if isinstance(head, str) else None


PROGRESS_EVERY = 5000  # events applied between two calls of a replay's `progress`


def replay_frames(recording: Recording, times_s: list[float],
                  progress: Callable[[int, int], None] | None = None):
    """Yield (t, states) at each of the ascending `times_s`, applying the records in between.

    The states are one dict updated in place: use each before asking for the next. Time is
    linear in the events applied. `progress(events done, events in all)` is called every
    PROGRESS_EVERY events or so: a page passes a function that draws, so that a visitor who
    leaves stops the replay there (Streamlit stops a script at its next drawing call).
    """
    states: dict[str, EngineState] = {}
    records = sorted(recording.batches + recording.scrapes + recording.replies, key=lambda r: r.t_s)
    total = sum(len(r.batch.events) for r in recording.batches)
    i, done, told = 0, 0, 0
    for t_s in times_s:
        with older_objects_frozen():
            while i < len(records) and records[i].t_s <= t_s:
                apply_record(states, records[i])
                done += len(records[i].batch.events) if isinstance(records[i], BatchRecord) else 0
                i += 1
                if progress is not None and done - told >= PROGRESS_EVERY:
                    progress(done, total)
                    told = done
        yield t_s, states


@contextmanager
def older_objects_frozen():
    """Python's full collections leave out the objects that exist on entry (gc.freeze) until exit.

    A replay makes many small objects; each full collection that triggers traverses every object
    of the process, and in a dashboard's server that is its models and every session's state. The
    replay's time then grew with the server's heap, not with the events: 40,000 blocks after one
    parent took 2.05 × four times 10,000 (`make bench`, after the benchmarks that load models).
    Garbage is still collected: what is new is traversed as before, and exit returns the older
    objects to the oldest generation (another thread's exit may do so sooner: harmless).

    In the dashboard's server, which froze what it keeps for good (kvviz.app.collector), it does
    nothing: the models and modules are out of the collections already, and unfreezing on exit
    would give them back to every full collection after the replay."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def apply_record(states: dict[str, EngineState], record) -> None:
    if isinstance(record, BatchRecord):
        apply_batch(states, record.url, record.rank, record.seq, record.batch)
    elif isinstance(record, ReplyRecord):
        apply_reply(states, record.reply)
    else:
        apply_scrape(states, record.url, record.engines, record.t_s)


def states_at(recording: Recording, upto_s: float | None = None) -> dict[str, EngineState]:
    """The engine states after everything recorded up to `upto_s` (all of it when None)."""
    end = recording.duration_s if upto_s is None else upto_s
    for _, states in replay_frames(recording, [end]):
        return states
    return {}
