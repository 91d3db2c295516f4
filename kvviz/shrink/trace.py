"""The `kvviz-shrink` JSON file: a finished full-vs-shrunk comparison, written and read back.

Written by the Shrink page's download, read by the Replay page and the HTML report. Reading
validates the whole document against msgspec structs (unknown fields, wrong types, a wrong format
or version are refused in one sentence, as a TraceError like any other trace); the figures are
then computed from the steps by the same code as on the Shrink page (`shrink.Comparison`), never
copied from the file: where the runs diverge is recomputed from the tokens.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated

import msgspec
import torch

from kvviz.core.trace import TraceError
from kvviz.core.wire import decode_versioned, has_format
from kvviz.shrink.compute import Comparison, ShrinkRun, StepRecord, first_divergence

FORMAT, VERSION = "kvviz-shrink", 1
MAX_PROMPT_TOKENS = 1_000_000  # a bound on what a file may claim, far above any real prompt


# Every number a file may hold is bounded where it is read: a chart, a sum or a tensor never meets
# 2**64, an infinite time or a 400-digit count (each refused in a sentence).
Count = Annotated[int, msgspec.Meta(ge=0, le=10**7)]  # steps, positions
TokenId = Annotated[int, msgspec.Meta(ge=0, le=2**31)]
Bytes = Annotated[int, msgspec.Meta(ge=0, le=2**50)]  # a pebibyte: past any cache measured here
Label = Annotated[str, msgspec.Meta(max_length=500)]


class _Step(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    step: Count
    token_id: TokenId
    kv_bytes: Bytes
    step_ms: Annotated[float, msgspec.Meta(ge=0, le=1e7)]  # under three hours a step
    payload_bytes: Bytes = 0
    scale_bytes: Bytes = 0
    residual_bytes: Bytes = 0
    peak_bytes: Bytes = 0  # 0 in files written before peaks were measured
    cuda_peak_bytes: Bytes = 0


class _Side(msgspec.Struct, forbid_unknown_fields=True):
    label: Label
    text: str
    steps: Annotated[list[_Step], msgspec.Meta(max_length=100_000)]
    kept: dict[str, list[list[Count]]]  # layer -> per KV head, the prompt positions kept
    pieces: list[str] = []  # each new token's own text


class _Doc(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    format: str
    version: int
    prompt_tokens: list[str]
    diverged_at: Count | None
    full: _Side
    shrunk: _Side
    model: Label = ""
    mode: Label = ""  # the shrink mode's label, as the page showed it


@dataclass
class ShrinkRecord:
    """A comparison read back: the two runs, the prompt's token texts, and what ran."""

    result: Comparison
    prompt_pieces: list[str]  # the prompt's token texts, for the kept map
    model: str = ""


def as_record(result: Comparison, prompt_pieces: list[str], model: str = "") -> dict:
    """Both runs as plain JSON data: labels, texts, every step's measured record, the kept
    positions per layer and KV head, and the prompt's token texts (for the kept map)."""
    def side(run: ShrinkRun) -> dict:
        return {"label": run.label, "text": run.text, "steps": [asdict(s) for s in run.steps],
                "kept": {str(layer): pos.tolist() for layer, pos in run.kept.items()}, "pieces": run.pieces}
    return {"format": FORMAT, "version": VERSION, "model": model, "mode": result.shrunk.label,
            "prompt_tokens": prompt_pieces, "diverged_at": result.diverged_at,
            "full": side(result.full), "shrunk": side(result.shrunk)}


def to_json(result: Comparison, prompt_pieces: list[str], model: str = "") -> bytes:
    return msgspec.json.encode(as_record(result, prompt_pieces, model))


def is_record(data: bytes | str) -> bool:
    """Whether `data` is a JSON object whose format is kvviz-shrink (nothing else is checked)."""
    return has_format(data, FORMAT)


def from_json(data: bytes | str) -> ShrinkRecord:
    """A kvviz-shrink file, validated; TraceError names what is wrong."""
    doc = decode_versioned(data, _Doc, FORMAT, VERSION)
    n = len(doc.prompt_tokens)
    full, shrunk = _run(doc.full, n, "full"), _run(doc.shrunk, n, "shrunk")
    return ShrinkRecord(Comparison(full, shrunk, first_divergence(full.tokens, shrunk.tokens)),
                        doc.prompt_tokens, doc.model)


def _run(side: _Side, prompt_tokens: int, name: str) -> ShrinkRun:
    """One side as a ShrinkRun; its steps numbered 0, 1, ... and its kept positions in the prompt."""
    if not side.steps:
        raise TraceError(f"the {name} run holds no steps")
    if [s.step for s in side.steps] != list(range(len(side.steps))):
        raise TraceError(f"the {name} run's steps are not numbered 0, 1, 2, …")
    if side.pieces and len(side.pieces) != len(side.steps):
        raise TraceError(f"the {name} run has {len(side.steps)} steps but {len(side.pieces)} token texts")
    if prompt_tokens > MAX_PROMPT_TOKENS:
        raise TraceError(f"the file claims {prompt_tokens:,} prompt tokens")
    kept = {}
    for layer, heads in side.kept.items():
        if not layer.isdecimal() or len(layer) > 6:
            raise TraceError(f"the {name} run's kept positions name a layer {layer[:20]!r}, not a number")
        if len({len(h) for h in heads}) > 1 or any(not 0 <= p < prompt_tokens for h in heads for p in h):
            raise TraceError(f"the {name} run's kept positions of layer {layer} are not positions "
                             f"of the {prompt_tokens}-token prompt, the same count per head")
        kept[int(layer)] = torch.tensor(heads, dtype=torch.long)
    return ShrinkRun(side.label, [StepRecord(**msgspec.structs.asdict(s)) for s in side.steps], kept,
                     side.text, side.pieces)
