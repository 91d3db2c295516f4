"""Each layer's cache sizes read from the model's own code: run it, measure, correct the layout.

`kvviz.cache.layout` names each layer's kind with transformers' own resolution and sizes it from config
field names. Field names miss what the code does (Falcon's `num_kv_heads` / `multi_query`,
per-layer-type head counts, keys and values of different sizes, states in fields kvviz has no rule
for). So before a run kvviz feeds the loaded model one token, then one more, with a fresh cache of
the kind the run uses, reads every cache layer (K, V and state tensors with their dtypes) after
each, and takes per layer: values per token = growth between the two reads; state = what the
first read holds beyond one token. Kinds and caps stay the layout's (the two reads stay below
every window). A model whose probe fails keeps the field-name layout, with the reason.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from kvviz.cache import layout
from kvviz.live import probe


def measured_specs(specs, read_after: Callable[[int], list], elem_bytes: int) -> tuple[tuple, str]:
    """(specs with measured sizes, "") or (specs unchanged, why the probe failed).

    `read_after(n)` runs the model's n-th probe step (1: a one-token prefill, 2: one decode
    step) on batch 1 and returns `probe.read_cache` of its cache.
    """
    try:
        one, two = read_after(1), read_after(2)
    except probe.UnreadableCache as exc:
        return tuple(specs), f"sizes from config fields ({exc})"
    except Exception as exc:  # noqa: BLE001 - any model's code; the run must not die of it
        return tuple(specs), f"sizes from config fields (probe forward failed: {type(exc).__name__}: {exc})"
    if not any(r.k_bytes or r.v_bytes or r.state_bytes for r in one + two):
        return tuple(specs), NO_CACHE
    return tuple(_corrected(s, a, b, elem_bytes) for s, a, b in zip(specs, one, two)), ""


# The note of a model whose forward keeps nothing in the cache it is given (e.g. OpenAI GPT).
NO_CACHE = "this model keeps no KV cache (its forward stores nothing in one): the cached run recomputes every step"


def _corrected(spec: layout.LayerSpec, one: probe.LayerBytes, two: probe.LayerBytes,
               elem_bytes: int) -> layout.LayerSpec:
    if spec.kind == layout.SHARED:
        return spec
    kv_growth = (two.k_bytes + two.v_bytes) - (one.k_bytes + one.v_bytes)
    per_token = kv_growth // elem_bytes if spec.kind != layout.STATE else 0
    f32 = one.state_float32_bytes // 4 if elem_bytes != 4 else 0
    plain = (one.state_bytes - (f32 * 4 if elem_bytes != 4 else 0)) // elem_bytes
    if spec.kind == layout.LATENT or spec.index_values:  # sized right from its fields (tested)
        return spec
    heads = two.k_heads if per_token else spec.kv_heads
    return replace(spec, kv_heads=heads, values_per_token=per_token, state_values=plain,
                   state_float32_values=f32, state_known=True)
