"""The quality sweep: accuracy against compression on a real task, on the running model, measured
the way the kvpress leaderboard measures presses (RULER at ratios 0.25 / 0.5 / 0.75 / 0.9).

For each item of the task (kvviz.shrink.task) the full cache runs first, then every shrink mode on
the same prompt (item-major, so a mode is timed minutes at most from its reference). Each run is
greedy, NEW_TOKENS tokens, and is scored right or wrong. A row per mode gives:

- accuracy: right answers / items;
- bytes: the cache after the prompt (the compressed prompt: what is kept), mean over items,
  measured from the tensors; peak_bytes: the most bytes the run's own tensors held at once during
  any step of any item (kvviz.shrink.peak: the prefill's activations and the uncompressed layers a
  press has not yet evicted, a quantized cache's full-precision copies);
- step-time ratio: this mode's decode step over the full cache's, paired step by step on the same
  item, pooled over items: the median with its 25th-75th percentile spread ("within noise" when the
  spread holds 1).

A quantized setting has no eviction ratio: its `ratio` is the share of the full cache's bytes it
saved (1 - bytes / full bytes), measured. Rows are saved as a `kvviz-shrink-sweep` JSON file that
the Shrink page replays.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from statistics import median
from typing import Annotated, Callable, Literal

import msgspec

from kvviz.core.trace import TraceError
from kvviz.core.wire import decode_versioned, has_format
from kvviz.shrink import compute as shrink
from kvviz.shrink import peak, task

NEW_TOKENS = 5  # the answer's number (SmolLM2 writes digits one token each) and its full stop
RATIOS = (0.25, 0.5, 0.75, 0.9)
QUANT = (("quanto", 4), ("quanto", 2), ("hqq", 4), ("hqq", 2), ("fp8", 8))
RESIDUAL = 16
FORMAT, VERSION = "kvviz-shrink-sweep", 1
FULL, PRESS, QUANTIZED = "full", "press", "quantized"


def item_ids(tokenizer, item: task.TaskItem):
    """An item's prompt ids: the context and question through the chat template, the answer's start given."""
    return shrink.prompt_ids(tokenizer, item.prompt, answer_prefix=item.answer_prefix)


def quant_offered(backends: dict) -> list[tuple[str, int]]:
    """The QUANT settings whose backend and bit width run here (backends: backend -> bits)."""
    return [(b, n) for b, n in QUANT if n in backends.get(b, ())]


def modes(press_names, quant: list[tuple[str, int]], ratios=RATIOS) -> list[shrink.ShrinkMode]:
    """The full cache, each press at each ratio, each quantized setting (backend, bits)."""
    out = [shrink.ShrinkMode()]
    out += [shrink.ShrinkMode(press=name, ratio=r) for name in press_names for r in ratios]
    out += [shrink.ShrinkMode(backend=b, nbits=n, residual_length=RESIDUAL) for b, n in quant]
    return out


def kind_of(mode: shrink.ShrinkMode) -> str:
    return QUANTIZED if mode.backend else PRESS if mode.press != "none" else FULL


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..1) of a non-empty list."""
    return shrink.quantile(sorted(values), q)


@dataclass
class Tally:
    """One mode's measurements accumulated over items."""

    right: int = 0
    items: int = 0
    bytes: list[int] = field(default_factory=list)
    peak: int = 0
    cuda_peak: int = 0
    step_ratios: list[float] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)

    def add(self, run: shrink.ShrinkRun, item: task.TaskItem, reference: shrink.ShrinkRun) -> None:
        self.items += 1
        self.right += item.is_right(run.text)
        self.bytes.append(run.steps[0].kv_bytes)
        self.peak = max([self.peak] + [s.peak_bytes for s in run.steps])
        self.cuda_peak = max([self.cuda_peak] + [s.cuda_peak_bytes for s in run.steps])
        self.step_ratios += [a.step_ms / b.step_ms for a, b in zip(run.steps[1:], reference.steps[1:]) if b.step_ms > 0]
        self.answers.append(run.text)


@dataclass(frozen=True)
class SweepRow:
    mode: str  # the mode's label
    kind: str  # FULL, PRESS or QUANTIZED
    press: str
    ratio: float  # press: the share of prompt positions evicted; quantized: bytes saved (measured)
    backend: str
    nbits: int
    items: int
    right: int
    accuracy: float
    bytes: int  # the cache after the prompt, mean over items (measured)
    peak_bytes: int  # tracked peak of the run's tensors, any step, any item
    cuda_peak_bytes: int  # CUDA allocator's peak (whole process); 0 off CUDA
    step_ratio: float  # decode step time ÷ the full cache's, median of paired steps
    step_ratio_lo: float  # 25th percentile
    step_ratio_hi: float  # 75th percentile

    @property
    def within_noise(self) -> bool:
        return self.step_ratio_lo <= 1.0 <= self.step_ratio_hi


def row(mode: shrink.ShrinkMode, tally: Tally, full_bytes: float) -> SweepRow:
    kept = sum(tally.bytes) / len(tally.bytes)
    ratio = mode.ratio if kind_of(mode) == PRESS else (1 - kept / full_bytes if full_bytes and mode.backend else 0.0)
    ratios = tally.step_ratios or [1.0]
    return SweepRow(mode.label(), kind_of(mode), mode.press if kind_of(mode) == PRESS else "", round(ratio, 4),
                    mode.backend, mode.nbits if mode.backend else 0, tally.items, tally.right,
                    tally.right / tally.items, round(kept), tally.peak, tally.cuda_peak,
                    round(median(ratios), 4), round(percentile(ratios, 0.25), 4), round(percentile(ratios, 0.75), 4))


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    mode: str
    item: int  # 1-based
    items: int
    elapsed_s: float

    def line(self) -> str:
        m, s = divmod(int(self.elapsed_s), 60)
        return (f"[{self.done:>3}/{self.total}] item {self.item} of {self.items}: {self.mode} "
                f"({m}m {s:02d}s so far)")


@dataclass
class Sweep:
    """The finished (or stopped) sweep: one row per mode, the model, the task's note."""

    rows: list[SweepRow]
    model: str = ""
    task: str = ""
    new_tokens: int = NEW_TOKENS
    peak_how: str = peak.HOW["tracked"]
    complete: bool = True


def run(lm, items: list[task.TaskItem], wanted: list[shrink.ShrinkMode], progress: Callable[[Progress], None] | None = None,
        should_stop: Callable[[], bool] | None = None, new_tokens: int = NEW_TOKENS, note: str = "") -> Sweep:
    """Every mode on every item (item-major: the full cache first on each); rows in `wanted`'s order.
    UserError before any run for a mode `compute.check_run` refuses on any item."""
    wanted = [shrink.ShrinkMode()] + [m for m in wanted if m != shrink.ShrinkMode()]
    prompts = [item_ids(lm.tokenizer, item) for item in items]
    for ids in prompts:
        for mode in wanted:
            shrink.check_run(lm, ids.shape[1], new_tokens, mode)
    tallies = {mode: Tally() for mode in wanted}
    started, done, total, complete = time.monotonic(), 0, len(items) * len(wanted), True
    for n, (item, ids) in enumerate(zip(items, prompts), 1):
        reference = None
        for mode in wanted:
            if should_stop is not None and should_stop():
                complete = False
                break
            if progress is not None:
                progress(Progress(done, total, mode.label(), n, len(items), time.monotonic() - started))
            out = shrink.run(lm, ids, new_tokens, mode)
            reference = reference or out
            tallies[mode].add(out, item, reference)
            done += 1
        if not complete:
            break
    if progress is not None:
        progress(Progress(done, total, "done" if complete else "stopped", len(items), len(items),
                          time.monotonic() - started))
    full = tallies[shrink.ShrinkMode()]
    full_bytes = sum(full.bytes) / len(full.bytes) if full.bytes else 0.0
    rows = [row(mode, t, full_bytes) for mode, t in tallies.items() if t.items]
    how = peak.HOW["cuda"] if lm.device.type == "cuda" else peak.HOW["tracked"]
    return Sweep(rows, lm.label, note, new_tokens, how, complete)


# ------------------------------------------------------------------ the file
# Every number a file may hold is bounded where it is read (a chart, a sum or a division never
# meets 2**64 or a million rows), and every text it may show is one kvviz wrote or plain data.
MAX_ROWS = 200  # a sweep is 1 + presses × ratios + quantized settings: 26 on the default model
Count = Annotated[int, msgspec.Meta(ge=0, le=10**6)]  # items, answers, tokens, bits
Bytes = Annotated[int, msgspec.Meta(ge=0, le=2**50)]  # a pebibyte: past any cache measured here
Share = Annotated[float, msgspec.Meta(ge=0, le=1)]
Ratio = Annotated[float, msgspec.Meta(ge=0, le=1e6)]
PeakHow = Literal[("", *peak.HOW.values())]  # the caption kvviz wrote, never a file's own text


class _Row(msgspec.Struct, forbid_unknown_fields=True):
    mode: Annotated[str, msgspec.Meta(max_length=200)]
    kind: Annotated[str, msgspec.Meta(pattern="^(full|press|quantized)$")]
    press: Annotated[str, msgspec.Meta(max_length=100)]
    ratio: Share
    backend: Annotated[str, msgspec.Meta(max_length=20)]
    nbits: Count
    items: Count
    right: Count
    accuracy: Share
    bytes: Bytes
    peak_bytes: Bytes
    cuda_peak_bytes: Bytes
    step_ratio: Ratio
    step_ratio_lo: Ratio
    step_ratio_hi: Ratio


class _Doc(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    version: int
    rows: Annotated[list[_Row], msgspec.Meta(max_length=MAX_ROWS)]
    model: Annotated[str, msgspec.Meta(max_length=500)] = ""
    task: Annotated[str, msgspec.Meta(max_length=2000)] = ""
    new_tokens: Count = NEW_TOKENS
    peak_how: PeakHow = ""
    complete: bool = True


def to_json(result: Sweep) -> bytes:
    return msgspec.json.encode({"format": FORMAT, "version": VERSION, "model": result.model, "task": result.task,
                                "new_tokens": result.new_tokens, "peak_how": result.peak_how,
                                "complete": result.complete, "rows": [asdict(r) for r in result.rows]})


def is_sweep(data: bytes | str) -> bool:
    return has_format(data, FORMAT)


def from_json(data: bytes | str) -> Sweep:
    """A kvviz-shrink-sweep file, validated; TraceError names what is wrong."""
    doc = decode_versioned(data, _Doc, FORMAT, VERSION)
    rows = [SweepRow(**msgspec.structs.asdict(r)) for r in doc.rows]
    if any(r.right > r.items for r in rows):
        raise TraceError("a row claims more right answers than items")
    if sum(r.kind == FULL for r in rows) > 1:
        raise TraceError("the file holds more than one full-cache row; a sweep has one reference")
    return Sweep(rows, doc.model, doc.task, doc.new_tokens, doc.peak_how, doc.complete)
