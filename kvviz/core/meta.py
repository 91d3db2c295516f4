"""A run's metadata as a typed record: what a trace says about the model, the cache and the run.

`RunMeta` is a msgspec Struct whose fields are the trace file's `meta` keys, in the order the file
writes them, so a trace re-saved is byte for byte the file it was loaded from. Every number carries
the range a chart may divide by, size an axis or a grid by (a hand-edited or hostile file is refused
when it loads, with the field named); a field a file lacks is None, and `missing_run_facts` says
which of the facts the dashboard needs are absent. The cache layout (`layers`) is one `LayerRecord`
per decoder layer, read into `kvviz.core.spec` classes once (`RunMeta.specs`); a version 1 or 2
file's parallel lists (`windows`, `layer_kinds`, ...) are read into the same records when it loads.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from typing import Annotated, Any, Literal

import msgspec

from kvviz.core.errors import UserError
from kvviz.core.spec import KINDS, CacheSpec


class MetaError(UserError):
    """A trace meta that kvviz cannot read; the message names the field and is written for the user."""


# --- one layer's cache ---------------------------------------------------------------------------

_Count = Annotated[int, msgspec.Meta(ge=0, le=2**40)]
_Layer = Annotated[int, msgspec.Meta(ge=0, le=4095)]
_Cap = Annotated[int, msgspec.Meta(ge=1, le=2**40)]


class LayerRecord(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """One decoder layer's cache on file: `kvviz.core.spec.CacheSpec`'s fields, defaults left out."""

    kind: Literal[KINDS]  # type: ignore[valid-type] - "full", "sliding", "chunked", "latent", "state", "shared"
    kv_heads: Annotated[int, msgspec.Meta(ge=0, le=65_536)] = 0
    values_per_token: _Count = 0
    token_cap: _Cap | None = None
    state_values: _Count = 0
    shared_with: _Layer | None = None
    state_float32_values: _Count = 0
    state_known: bool = True
    latent_rope: _Count = 0
    index_values: _Count = 0
    conv_values: _Count = 0
    conv_kernel: _Count = 0
    state_family: Annotated[str, msgspec.Meta(max_length=40, pattern="^[a-z0-9_]*$")] = ""
    state_pinned: bool = False
    key_values_per_token: _Count | None = None
    fixed_tokens: _Count = 0


def spec_record(spec: CacheSpec) -> LayerRecord:
    """One spec as the trace writes it (what `RunMeta.specs` reads back)."""
    return LayerRecord(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)})


def spec_of(record: LayerRecord, index: int) -> CacheSpec:
    try:
        return CacheSpec(**msgspec.to_builtins(record))  # the fields not at their default
    except UserError as exc:
        raise MetaError(f"meta.layers[{index}]: {exc}") from None


# --- the run -------------------------------------------------------------------------------------

# The range each number must fall in before a chart divides by it, sizes an axis or a grid by it:
# generous for any real model, run and machine, and refusing the zeros and the 10⁹-layer models a
# hand-edited or hostile file can carry.
RUN_BOUNDS = {"num_layers": (1, 4096), "num_kv_heads": (0, 4096), "head_dim": (0, 65_536),
              "elem_bytes": (1, 8), "bytes_per_token": (0, 2**40), "state_bytes": (0, 2**50),
              "weight_bytes": (0, 2**50), "prompt_tokens": (1, 10_000_000), "batch": (1, 4096),
              "max_len": (1, 10_000_000)}
# The facts the dashboard needs to draw a run (state_bytes is optional: older files lack it).
RUN_FACTS = ("num_layers", "num_kv_heads", "head_dim", "elem_bytes", "bytes_per_token",
             "weight_bytes", "prompt_tokens", "batch", "max_len")
MAX_RESERVED_BYTES = 2**50  # bytes_per_token × max_len × batch: a pebibyte, past any real run
_Text = Annotated[str, msgspec.Meta(max_length=10_000)]
_Int = {name: Annotated[int, msgspec.Meta(ge=low, le=high)] for name, (low, high) in RUN_BOUNDS.items()}


class RunMeta(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True, dict=True):
    """A run's metadata (model, cache layout, device, dtype, sizes, settings, versions).

    Field order is the file's key order. None: the file did not say.
    """

    model: _Text | None = None
    model_label: _Text | None = None
    device: _Text | None = None
    dtype: _Text | None = None
    num_layers: _Int["num_layers"] | None = None
    num_kv_heads: _Int["num_kv_heads"] | None = None
    head_dim: _Int["head_dim"] | None = None
    layers: list[LayerRecord] | None = None  # one per decoder layer; None: layout not modelled
    layout: _Text | None = None  # the kinds counted, for captions ("30 full"), or why not modelled
    state_modelled: bool | None = None
    elem_bytes: _Int["elem_bytes"] | None = None
    bytes_per_token: _Int["bytes_per_token"] | None = None
    state_bytes: _Int["state_bytes"] | None = None
    attn_implementation: _Text | None = None
    attn_fallback: _Text | None = None  # why the asked-for attention was not used
    cache_caveat: _Text | None = None  # what kvviz cannot count for this model's cache
    weight_bytes: _Int["weight_bytes"] | None = None
    prompt_tokens: _Int["prompt_tokens"] | None = None
    batch: _Int["batch"] | None = None
    max_len: _Int["max_len"] | None = None
    prompt_pieces: list[list[str | None]] | None = None  # each prompt position's text, per sequence
    config: dict[str, Any] | None = None  # the RunConfig's fields
    versions: dict[str, str] | None = None

    @functools.cached_property
    def specs(self) -> tuple[CacheSpec, ...]:
        """Each layer's cache spec; () when the layout was not modelled."""
        return tuple(spec_of(r, i) for i, r in enumerate(self.layers or ()))

    @property
    def reserved_bytes(self) -> int:
        """A contiguous cache for max_len tokens per sequence: bytes_per_token × max_len × batch."""
        return (self.bytes_per_token or 0) * (self.max_len or 0) * (self.batch or 0)

    def setting(self, name: str, default=None):
        """One of the run's settings (`config`), or `default` where the file does not record it."""
        return (self.config or {}).get(name, default)

    def missing_run_facts(self) -> list[str]:
        """The facts the dashboard needs to draw this run that the file lacks."""
        return [name for name in RUN_FACTS if getattr(self, name) is None]

    def with_batch(self, batch: int) -> RunMeta:
        return msgspec.structs.replace(self, batch=batch)


def read_meta(fields: dict, where: str = "meta") -> RunMeta:
    """A meta read from plain data (a file's `meta` object); MetaError naming the field if invalid.

    Keys kvviz does not know are left out, as an older kvviz's extra fields.
    """
    try:
        meta = msgspec.convert(fields, RunMeta, strict=True)
    except msgspec.ValidationError as exc:
        raise MetaError(out_of_range(fields, exc) or validation_problem(exc, where)) from None
    meta.specs  # noqa: B018 - every layer checked by its spec class now, not when first drawn
    if meta.reserved_bytes > MAX_RESERVED_BYTES:
        raise MetaError(f"{where}: a reservation of bytes_per_token × max_len × batch = "
                        f"{meta.reserved_bytes:,} bytes is past what any run holds "
                        f"({MAX_RESERVED_BYTES:,}); kvviz draws runs up to that")
    return meta


def out_of_range(fields: dict, exc: msgspec.ValidationError) -> str | None:
    """"this trace's meta says batch = 0; kvviz draws traces with batch from 1 to 4,096" for a
    whole number outside its range, else None."""
    name = str(exc).partition(" - at `$.")[2].rstrip("`")
    value = fields.get(name)
    if name not in RUN_BOUNDS or not _is_int(value):
        return None
    low, high = RUN_BOUNDS[name]
    return (f"this trace's meta says {name} = {value:,}; kvviz draws traces with {name} "
            f"from {low:,} to {high:,}")


def as_dict(meta: RunMeta) -> dict:
    """The meta as the file writes it (fields the file does not say left out)."""
    return msgspec.to_builtins(meta)


def validation_problem(exc: msgspec.ValidationError, where: str) -> str:
    """msgspec's "Expected `int` >= 0 - at `$.layers[3].kv_heads`" as "meta.layers[3].kv_heads:
    expected int >= 0"."""
    text, _, at = str(exc).partition(" - at `$")
    text = text.replace("`", "")
    return f"{where}{at.rstrip('`')}: {text[:1].lower()}{text[1:]}"


# --- older files ---------------------------------------------------------------------------------

LEGACY_KEYS = ("windows", "layer_kinds", "layer_labels", "layer_bytes_per_token", "layer_state_bytes")


def upgraded_meta(meta: dict) -> dict:
    """A version 1 or 2 meta with its parallel lists read into `layers` (format 3)."""
    if "layers" in meta or not _is_int(meta.get("num_layers")) or not 0 < meta["num_layers"] <= 4096:
        return meta
    upgraded = {k: v for k, v in meta.items() if k not in LEGACY_KEYS}
    if str(meta.get("layout", "")).startswith("not modelled"):  # as format 3 writes it: no layers
        return upgraded
    specs = legacy_specs(meta)
    return {**upgraded, "layers": [as_dict(spec_record(s)) for s in specs]} if specs else upgraded


def legacy_specs(meta: dict) -> tuple[CacheSpec, ...]:
    """Specs from a format 1 / 2 meta: `windows` (format 1: a window per sliding layer, else null),
    `layer_kinds` / `layer_labels` and per-layer bytes (format 2). Never raises: a value it cannot
    read makes that layer full attention, as the older views drew it."""
    n = meta.get("num_layers")
    if not _is_int(n) or not 0 < n <= 4096:
        return ()
    return tuple(_legacy_spec(meta, i) for i in range(n))


def _legacy_list(meta: dict, key: str, n: int) -> list:
    value = meta.get(key)
    return value if isinstance(value, list) and len(value) >= n else [None] * n


def _legacy_spec(meta: dict, i: int) -> CacheSpec:
    n, elem = meta["num_layers"], meta.get("elem_bytes")
    elem = elem if _is_int(elem) and elem > 0 else 1
    window = _legacy_list(meta, "windows", n)[i]
    window = window if _is_int(window) and window >= 1 else None
    kind = _legacy_list(meta, "layer_kinds", n)[i] if isinstance(meta.get("layer_kinds"), list) else None
    kind = kind if kind in KINDS else ("sliding" if window else "full")
    label = _legacy_list(meta, "layer_labels", n)[i]
    per_token, state = (_legacy_list(meta, k, n)[i] for k in ("layer_bytes_per_token", "layer_state_bytes"))
    heads, head_dim = (meta.get(k) if _is_int(meta.get(k)) else 0 for k in ("num_kv_heads", "head_dim"))
    values = per_token // elem if _is_int(per_token) and per_token >= 0 else 2 * heads * head_dim
    fields = dict(kv_heads=heads, values_per_token=values, token_cap=window,
                  state_values=state // elem if _is_int(state) and state >= 0 else 0)
    numbers = [int(x) for x in re.findall(r"\d+", label)] if isinstance(label, str) else []
    if kind in ("state", "shared"):
        fields.update(kv_heads=0, values_per_token=0, token_cap=None,
                      shared_with=numbers[0] if kind == "shared" and numbers else None,
                      state_known=kind != "state" or meta.get("state_modelled") is not False)
    elif kind == "latent":  # "latent 512+64 + index 128": rank, rope key, indexer keys
        parts = (numbers + [0, 0, 0])[:3]
        fields.update(kv_heads=1, token_cap=None, latent_rope=parts[1], index_values=parts[2],
                      values_per_token=fields["values_per_token"] if _is_int(per_token) else sum(parts))
    elif kind == "full":
        fields.update(token_cap=None)
    try:
        return CacheSpec(kind=kind, **fields)
    except UserError:  # a sliding / chunked layer without a usable window, a latent layer's odd label
        return CacheSpec(kind="full", **{**fields, "token_cap": None, "latent_rope": 0, "index_values": 0})


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
