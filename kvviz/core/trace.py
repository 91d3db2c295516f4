"""A run on file: metadata plus its StepEvents, saved, loaded with validation, and replayed.

The file format is documented in docs/trace-format.md. Loading is strict: whatever is wrong with a
file becomes one `TraceError` whose message says what and where, fit to show a user as is.
Events are validated by msgspec against Structs made from the fields and type hints of
`kvviz.core.events`'s dataclasses, so a field added there is checked here without editing this
module (bump VERSION when the format changes); msgspec's messages are worded as kvviz's own.
The meta is typed data: `kvviz.core.meta.RunMeta`, a msgspec Struct with constraints, whose
layers (format 3) are read into `kvviz.core.spec` classes; a version 1 or 2 file's parallel lists
(`windows`, `layer_kinds`, ...) are read into the same records when it loads.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys
import time
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Annotated

import msgspec

from kvviz.core.meta import MetaError, RunMeta, as_dict, read_meta, upgraded_meta
from kvviz.core.files import write_atomic  # also the vLLM watch's writer (kvviz.vllm reads only this module)
from kvviz.core.events import StepEvent
from kvviz.core.errors import UserError

FORMAT = "kvviz-trace"
VERSION = 3  # 2: LayerStat state_bytes/storage_bytes/formula_bytes, StepEvent storage_bytes/cache_note;
#               3: meta.layers (typed cache specs) replaces windows / layer_kinds / layer_labels / layer_*_bytes
MAX_TRACE_BYTES = 64 * 1024 * 1024
MODES = ("cached", "recompute")
PHASES = ("prefill", "decode")
_CHOICES = {"mode": MODES, "phase": PHASES}  # StepEvent fields restricted to a fixed set
_TOP_KEYS = ("format", "version", "meta", "events")


class TraceError(UserError):
    """A trace that cannot be saved or loaded; the message is written for the user."""


@dataclass
class Trace:
    """A run's metadata (model, config facts, device, dtype, versions) and its events, in order."""

    meta: RunMeta = field(default_factory=RunMeta)
    events: list[StepEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.meta, dict):  # plain data, e.g. a file's meta object: checked as it is read
            try:
                self.meta = read_meta(self.meta)
            except MetaError as exc:
                raise TraceError(str(exc)) from None

    def append(self, event: StepEvent) -> None:
        if not isinstance(event, StepEvent):
            raise TypeError(f"a Trace holds StepEvents, not {type(event).__name__}")
        self.events.append(event)

    def events_of(self, mode: str) -> list[StepEvent]:
        return [e for e in self.events if e.mode == mode]

    @property
    def modes(self) -> list[str]:
        """The modes present, in order of first appearance."""
        return list(dict.fromkeys(e.mode for e in self.events))

    def to_json(self) -> str:
        """One JSON document, one event per line (compact, yet greppable and diffable)."""
        meta = as_dict(self.meta)
        _check_json(meta, "meta")
        head = (f'{{"format": {json.dumps(FORMAT)}, "version": {VERSION},\n'
                f' "meta": {json.dumps(meta, allow_nan=False)},\n "events": [')
        lines = [_event_line(e, i) for i, e in enumerate(self.events)]
        return head + ("\n  " + ",\n  ".join(lines) + "\n" if lines else "") + " ]}\n"

    def save(self, path: str | os.PathLike) -> None:
        """Write atomically: a temp file in the same folder, then os.replace over `path`.

        A crash or a full disk leaves either the old file or the new one, never half a file.
        Refuses (TraceError) a trace that `load` would refuse: invalid, or over MAX_TRACE_BYTES.
        """
        text = self.to_json().encode("utf-8")
        _check_size(len(text), "trace")
        try:
            write_atomic(path, text)
        except OSError as exc:
            raise TraceError(f"cannot write {os.fspath(path)}: {exc.strerror or exc}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> Trace:
        """Parse and validate a trace document; raise TraceError on anything unexpected."""
        size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "replace"))
        _check_size(size, "file")
        doc = _parse(text)
        _check_header(doc)
        try:
            _check_json(doc["meta"], "meta")
        except RecursionError:
            raise TraceError("'meta' is nested too deeply") from None
        if not isinstance(doc["events"], list):
            raise TraceError(f"'events' must be a list, got {_kind(doc['events'])}")
        meta = doc["meta"] if doc["version"] >= 3 else upgraded_meta(doc["meta"])
        return cls(meta, [_event_from_dict(e, i) for i, e in enumerate(doc["events"])])

    @classmethod
    def load(cls, path: str | os.PathLike) -> Trace:
        """Read and validate a trace file (its size is checked before it is read)."""
        try:
            _check_size(os.path.getsize(path), "file")
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise TraceError(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from None
        return cls.from_json(data)


# --- reading -------------------------------------------------------------------------------------

def _check_size(size: int, what: str) -> None:
    if size > MAX_TRACE_BYTES:
        raise TraceError(f"the {what} is {_size(size)}; "
                         f"traces are limited to {_size(MAX_TRACE_BYTES)}")


def _size(n: int) -> str:
    """80.0 MiB, 64 MiB (whole MiB), or 1,000 bytes (under 1 MiB)."""
    if n < 1024 * 1024:
        return f"{n:,} bytes"
    mib = n / (1024 * 1024)
    return f"{mib:.0f} MiB" if mib == int(mib) else f"{mib:.1f} MiB"


def _parse(text: str | bytes):
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise TraceError(f"the file is not UTF-8 text (bad byte at offset {exc.start}); "
                             "is it a kvviz trace?") from None
    if not text.strip():
        raise TraceError("the file is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"the file is not JSON (it may be truncated): {exc}") from None
    except ValueError:  # an integer literal too long to convert (Python's message names its internals)
        raise TraceError("the file is not a kvviz trace: it holds a number more than "
                         f"{sys.get_int_max_str_digits():,} digits long") from None
    except RecursionError:
        raise TraceError("the file is not a kvviz trace: its JSON is nested too deeply") from None


def _check_header(doc) -> None:
    if not isinstance(doc, dict):
        raise TraceError(f"the file is not a kvviz trace: it holds {_kind(doc)}, "
                         "not a JSON object")
    if doc.get("format") != FORMAT:
        found = f"format {_show(doc['format'])}" if "format" in doc else "no 'format' field"
        raise TraceError(f"the file is not a kvviz trace: {found} (expected {FORMAT!r})")
    version = doc.get("version")
    if not _is_int(version) or version < 1:
        raise TraceError(f"the trace's 'version' must be a positive integer, got {_show(version)}")
    if version > VERSION:
        raise TraceError(f"this trace was written by a newer kvviz (format version {version}); "
                         f"this kvviz reads version {VERSION}")
    _check_keys(doc, _TOP_KEYS, _TOP_KEYS, "the trace")
    if not isinstance(doc["meta"], dict):
        raise TraceError(f"'meta' must be an object, got {_kind(doc['meta'])}")


def _check_keys(obj: dict, known: Iterable[str], required: Iterable[str], where: str) -> None:
    missing = [k for k in required if k not in obj]
    if missing:
        raise TraceError(f"{where}: missing field(s) {_names(missing)}")
    unknown = [k for k in obj if k not in known]
    if unknown:
        raise TraceError(f"{where}: unknown field(s) {_names(unknown)} "
                         f"(this kvviz reads format version {VERSION})")


def _check_json(value, path: str) -> None:
    """Meta holds only JSON: strings, finite numbers, booleans, null, lists, string-keyed dicts."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TraceError(f"{path}: keys must be strings, got {key!r}")
            _check_json(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_json(item, f"{path}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise TraceError(f"{path} must be a finite number, got {value}")
    elif value is not None and not isinstance(value, (str, int, float, bool)):
        raise TraceError(f"{path} must be a JSON value, got a {type(value).__name__}")


def _event_from_dict(obj, index: int) -> StepEvent:
    where = f"event {index}"
    if not isinstance(obj, dict):
        raise TraceError(f"{where} must be an object, got {_kind(obj)}")
    try:
        msgspec.convert(obj, _EVENT_WIRE, strict=True)  # the checks; then the dataclasses themselves
    except msgspec.ValidationError as exc:
        raise TraceError(f"{where}: {_field_problem(exc, obj)}") from None
    event = msgspec.convert(obj, StepEvent, strict=True)
    _check_event(event, where)
    return event


def _check_event(event: StepEvent, where: str) -> None:
    for name, allowed in _CHOICES.items():
        value = getattr(event, name)
        if value not in allowed:
            raise TraceError(f"{where}: field {name!r} must be one of {_names(allowed)}, "
                             f"got {value!r}")
    sizes = {len(event.token_ids), len(event.texts), len(event.finished)}
    if len(sizes) != 1:
        counts = f"{len(event.token_ids)}, {len(event.texts)}, {len(event.finished)}"
        raise TraceError(f"{where}: 'token_ids', 'texts' and 'finished' must have one entry "
                         f"per sequence, got {counts}")


# Events on file are checked against msgspec Structs made from the dataclasses of kvviz.core.events
# (their fields and type hints): no unknown field, every required one, integers not booleans, and
# every number finite and non-negative.
_NUMBERS = {int: Annotated[int, msgspec.Meta(ge=0)],
            float: Annotated[float, msgspec.Meta(ge=0, le=sys.float_info.max)]}


def _wire_type(hint):
    """The msgspec type checking one field of type `hint` on file."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_wire_type(a) for a in args)]
    if origin is tuple:
        return tuple[_wire_type(args[0]), ...]
    if dataclasses.is_dataclass(hint):
        return _wire_struct(hint)
    return _NUMBERS.get(hint, hint)


def _wire_struct(cls) -> type[msgspec.Struct]:
    hints = typing.get_type_hints(cls)
    fields = [(f.name, _wire_type(hints[f.name])) if f.default is dataclasses.MISSING
              else (f.name, _wire_type(hints[f.name]), f.default) for f in dataclasses.fields(cls)]
    return msgspec.defstruct(f"{cls.__name__}Wire", fields, forbid_unknown_fields=True)


_EVENT_WIRE = _wire_struct(StepEvent)
_EXPECTED = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false",
             "array": "a list", "object": "an object"}


def _field_problem(exc: msgspec.ValidationError, obj: dict) -> str:
    """msgspec's message as kvviz words it: "field 'layers[1].k_bytes' must be an integer, got null"."""
    text, _, at = str(exc).partition(" - at `$")
    path = at.rstrip("`").lstrip(".")
    named = re.match(r"Object (missing required|contains unknown) field `(.*)`$", text)
    if named:
        field_path = f"{path}.{named[2]}" if path else named[2]
        if named[1] == "missing required":
            return f"missing field(s) {_names([field_path])}"
        return f"unknown field(s) {_names([field_path])} (this kvviz reads format version {VERSION})"
    try:
        value = _value_at(obj, path)
    except (KeyError, IndexError, TypeError, ValueError):
        value = None
    expected = re.match(r"Expected `(\w+)[^`]*`( [<>]=)?", text)
    kind = expected[1] if expected else ""
    if expected and expected[2]:  # a range: every event number is finite and non-negative
        if kind == "float":
            return f"field {path!r} must be a finite, non-negative number, got {_show(value)}"
        return f"field {path!r} must not be negative, got {_show(value)}"
    return f"field {path!r} must be {_EXPECTED.get(kind, text)}, got {_show(value)}"


def _value_at(obj, path: str):
    """The value at "layers[1].k_bytes" in a parsed JSON object."""
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        obj = obj[int(part[1:-1])] if part.startswith("[") else obj[part]
    return obj


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value) -> str:
    kinds = {dict: "an object", list: "a list", tuple: "a list", str: "a string",
             bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


def _show(value) -> str:
    """A short JSON rendering of a bad value, for messages (containers by kind only)."""
    if isinstance(value, (dict, list, tuple)):
        return _kind(value)
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _names(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in names)


# --- writing -------------------------------------------------------------------------------------

def _event_line(event: StepEvent, index: int) -> str:
    """One event as compact JSON, validated by the same rules `load` applies (never save junk)."""
    obj = dataclasses.asdict(event)
    _event_from_dict(obj, index)
    try:
        return json.dumps(obj, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TraceError(f"event {index} cannot be saved: {exc}") from None


# --- replay --------------------------------------------------------------------------------------

def replay(events: Iterable[StepEvent], speed: float = 1.0,
           sleep: Callable[[float], None] = time.sleep) -> Iterator[StepEvent]:
    """Yield `events` in the order given, sleeping step_ms / 1000 / speed seconds before each.

    speed 2 plays twice as fast; speed 0 or inf yields at once. Pass `trace.events_of(mode)` to
    replay one mode: a trace stores each mode's run as its own consecutive sequence.
    """
    if math.isnan(speed) or speed < 0:
        raise UserError(f"replay speed must be >= 0, got {speed}")
    pace = speed not in (0, math.inf)
    for event in events:
        if pace and event.step_ms > 0:
            sleep(event.step_ms / 1000 / speed)
        yield event


# --- summary -------------------------------------------------------------------------------------

def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between closest ranks (numpy's default):
    position (n - 1) * q / 100 in the sorted values. None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True, kw_only=True)
class ModeSummary:
    """Headline numbers of one mode's events (see `summary` for how each is counted)."""

    ttft_ms: float | None  # the prefill's step_ms: time to first token
    itl_median_ms: float | None  # median decode step_ms (inter-token latency)
    itl_p95_ms: float | None
    new_tokens: int  # tokens generated per sequence = steps
    batch: int
    tokens_per_s: float | None  # new_tokens x batch / (total_ms / 1000)
    peak_kv_bytes: int
    peak_formula_bytes: int
    total_ms: float  # every step's step_ms, prefill included


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """A run's headline numbers per mode, and how the two modes compare."""

    modes: dict[str, ModeSummary]  # per mode present, in order of first appearance
    recompute_speedup: float | None  # recompute ÷ cached summed step_ms over `speedup_steps`
    speedup_steps: int  # the steps both modes have

    def mode(self, name: str) -> ModeSummary:
        """The mode's numbers, or those of no events (zeros and None) when it is absent."""
        return self.modes.get(name) or mode_summary([])


def mode_summary(events: list[StepEvent]) -> ModeSummary:
    """Headline numbers of one mode's events (see `summary`)."""
    decode = [e.step_ms for e in events if e.phase == "decode"]
    prefill = [e.step_ms for e in events if e.phase == "prefill"]
    total_ms = sum(e.step_ms for e in events)
    batch = len(events[0].token_ids) if events else 0
    new_tokens = len(events)
    return ModeSummary(
        ttft_ms=prefill[0] if prefill else None,
        itl_median_ms=percentile(decode, 50),
        itl_p95_ms=percentile(decode, 95),
        new_tokens=new_tokens,
        batch=batch,
        tokens_per_s=new_tokens * batch / (total_ms / 1000) if total_ms > 0 else None,
        peak_kv_bytes=max((e.kv_bytes for e in events), default=0),
        peak_formula_bytes=max((e.formula_bytes for e in events), default=0),
        total_ms=total_ms,
    )


def summary(trace: Trace) -> RunSummary:
    """Per mode present: ttft_ms is the prefill's step_ms (time to first token); itl_median_ms and
    itl_p95_ms are percentiles of the decode steps' step_ms by linear interpolation (`percentile`);
    new_tokens is the tokens generated per sequence = the number of steps (the prefill picks the
    first token, each decode step one more); tokens_per_s = new_tokens × batch / (total_ms / 1000),
    counting every sequence at every step, even one that already stopped at EOS; total_ms is the
    sum of every step's step_ms, prefill included; peak_* are maxima over the steps.
    recompute_speedup = the recompute steps' summed step_ms / the cached steps' summed step_ms over
    the first `speedup_steps` steps of each, the number both modes have (runs cut short still
    compare like with like); None unless both modes are present.
    """
    modes = {m: mode_summary(trace.events_of(m)) for m in trace.modes}
    cached, recompute = trace.events_of("cached"), trace.events_of("recompute")
    steps = min(len(cached), len(recompute))
    cached_ms = sum(e.step_ms for e in cached[:steps])
    recompute_ms = sum(e.step_ms for e in recompute[:steps])
    speedup = recompute_ms / cached_ms if steps and cached_ms > 0 else None
    return RunSummary(modes=modes, recompute_speedup=speedup, speedup_steps=steps)


def _bytes_cell(n: float) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.2f} KiB"


_ROWS = (  # (label, key, formatter)
    ("time to first token", "ttft_ms", lambda v: f"{v:.1f} ms"),
    ("inter-token median", "itl_median_ms", lambda v: f"{v:.1f} ms"),
    ("inter-token p95", "itl_p95_ms", lambda v: f"{v:.1f} ms"),
    ("throughput", "tokens_per_s", lambda v: f"{v:.1f} tok/s"),
    ("new tokens x batch", "new_tokens", None),
    ("peak KV cache", "peak_kv_bytes", _bytes_cell),
    ("peak formula", "peak_formula_bytes", _bytes_cell),
    ("total time", "total_ms", lambda v: f"{v:.1f} ms"),
)


def _cell(numbers: ModeSummary, key: str, fmt) -> str:
    if key == "new_tokens":
        return f"{numbers.new_tokens} x {numbers.batch}"
    value = getattr(numbers, key)
    return "n/a" if value is None else fmt(value)


def format_summary(summary: RunSummary) -> str:
    """The summary as a small aligned plain-text table, one column per mode, units on values."""
    modes = summary.modes
    table = [[""] + list(modes)]
    table += [[label] + [_cell(modes[m], key, fmt) for m in modes] for label, key, fmt in _ROWS]
    widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) if c == 0 else cell.rjust(w)
                       for c, (cell, w) in enumerate(zip(row, widths))).rstrip() for row in table]
    if summary.recompute_speedup is not None:
        lines.append(f"recompute is {summary.recompute_speedup:.2f}x slower than cached "
                     f"over the first {summary.speedup_steps} steps")
    return "\n".join(lines)


MAX_STEP_MS = 600_000.0  # a replay sleeps each step's time: no step over 10 minutes
MAX_REPLAY_STEPS = 100_000  # events per mode the replay panels draw


def check_run_meta(trace: Trace) -> None:
    """The facts the dashboard needs to draw a trace; TraceError naming what is missing.

    The range of each number is checked when the meta is read (`kvviz.core.meta.RunMeta`)."""
    missing = trace.meta.missing_run_facts()
    if missing:
        raise TraceError(f"this trace's meta lacks whole numbers for {', '.join(missing)}; "
                         "record it with `kvviz record` or the Live page")
    layers, num_layers = trace.meta.layers, trace.meta.num_layers
    if layers is not None and len(layers) != num_layers:
        raise TraceError(f"this trace's meta describes {len(layers):,} layers in 'layers' but says "
                         f"num_layers = {num_layers:,}")
    if not trace.events_of("cached"):
        raise TraceError("this trace has no cached-mode events to show")
    _check_replayable_events(trace)


def _check_replayable_events(trace: Trace) -> None:
    """Step times a replay can sleep through and step counts its charts can hold."""
    for mode in trace.modes:
        if len(trace.events_of(mode)) > MAX_REPLAY_STEPS:
            raise TraceError(f"this trace has {len(trace.events_of(mode)):,} {mode} steps; kvviz "
                             f"replays at most {MAX_REPLAY_STEPS:,}")
    for index, event in enumerate(trace.events):
        if event.step_ms > MAX_STEP_MS:
            raise TraceError(f"event {index}: step_ms = {event.step_ms:,.0f}, more than the "
                             f"{MAX_STEP_MS / 60_000:.0f} minutes a replayed step may take")


def achieved_bandwidth_bytes_per_s(weight_bytes: int, cache_bytes_read: int,
                                   step_ms: float) -> float | None:
    """(weights + cache read) / measured step time: the traffic a decode step must at least cause.

    None for a step of no measured length.
    """
    if step_ms <= 0:
        return None
    return (weight_bytes + cache_bytes_read) / (step_ms / 1000)
