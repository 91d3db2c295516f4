"""Each layer's cache sizes read from the model's own code: run it, measure, correct the layout.

`kvviz.core.layout` names each layer's kind with transformers' own resolution and sizes it from config
field names. Field names miss what the code does (Falcon's `num_kv_heads` / `multi_query`,
per-layer-type head counts, keys and values of different sizes, indexers shared between layers,
positions the code adds, looped layers, states kept on modules). So before a run kvviz feeds the
loaded model two tokens, then one more, with a fresh cache of the kind the run uses, and reads every
cache layer (K, V, indexer keys and state tensors with their dtypes; layers past the decoder count
too) after each, plus every tensor the decode step rewrote on the model's own modules. Per layer:
K and V per token = growth between the two reads; positions the code adds = what the first read
holds beyond the tokens fed; state = the fixed tensors; the window = the one the layer object keeps.
Kinds are the layout's (transformers' names). The decode step's logits are also compared with a
full forward of the same three tokens: a model whose cached step computes something else gets a
caveat, since its no-cache run may choose other tokens. A model whose probe fails keeps the
field-name layout, with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from kvviz.core import layout
from kvviz.engine import probe


@dataclass(frozen=True)
class ProbeRun:
    """What the model's own code did with the probe's tokens (batch 1)."""

    one: list  # probe.LayerBytes per cache layer after the probe's prefill (PREFILL_TOKENS)
    two: list  # ... after one decode step (both include the module states found)
    decoder_layers: int  # the model's decoder layers (the cache may hold more)
    module_states: tuple = ()  # probe.ModuleState: tensors the model rewrote on its own modules
    drift: float = 0.0  # |cached − recomputed| logits of the decode step over the largest logit


@dataclass(frozen=True)
class Probed:
    """The layout with measured sizes, or the field-name layout and why."""

    specs: tuple
    note: str = ""  # why sizes come from config fields, or NO_CACHE; "" when measured
    caveat: str = ""  # what the model's own code does that a reader of the figures should know
    module_states: tuple = ()  # probe.ModuleState the run must read beside the cache object


PREFILL_TOKENS = 2  # the probe's prefill; then one decode step (kvviz.engine.loop.probe_run)

# Relative logit drift of one cached decode step vs a full forward above which a model's cached
# steps are not the same computation as recomputing (fp32 noise is ~1e-6; half precision ~1e-2).
DRIFT_LIMIT = {4: 1e-3, 2: 0.1, 1: 0.1}


def measured_specs(specs, run: Callable[[], ProbeRun], elem_bytes: int) -> Probed:
    """Specs sized from `run()` (the model's own forwards), or the specs unchanged with the reason."""
    try:
        probed = run()
    except probe.UnreadableCache as exc:
        return Probed(tuple(specs), f"sizes from config fields ({exc})")
    except Exception as exc:  # noqa: BLE001 - any model's code; the run must not die of it
        return Probed(tuple(specs), f"sizes from config fields (probe forward failed: {type(exc).__name__}: {exc})")
    one, two = probed.one, probed.two
    if not any(r.k_bytes or r.v_bytes or r.state_bytes for r in one + two):
        return Probed(tuple(specs), NO_CACHE)
    specs = tuple(specs) + tuple(_extra_spec(r) for r in two[len(specs):])
    measured = tuple(_corrected(s, a, b, elem_bytes) for s, a, b in zip(specs, one, two))
    return Probed(measured, "", _caveat(measured, probed, elem_bytes), probed.module_states)


# The note of a model whose forward keeps nothing in the cache it is given (e.g. OpenAI GPT).
NO_CACHE = "this model keeps no KV cache (its forward stores nothing in one): the cached run recomputes every step"


def _extra_spec(read: probe.LayerBytes) -> layout.CacheSpec:
    """A cache layer past the decoder count (a looped model's copy of a layer): sized by _corrected."""
    return layout.CacheSpec(kind=layout.SLIDING if read.window else layout.FULL, kv_heads=0, values_per_token=0,
                            token_cap=read.window)


def _corrected(spec: layout.CacheSpec, one: probe.LayerBytes, two: probe.LayerBytes,
               elem_bytes: int) -> layout.CacheSpec:
    """The spec with every size the two reads measured: K and V per token (indexer keys, a latent's
    rope key), the positions held beyond the tokens seen, the window the layer object keeps, state."""
    if spec.kind == layout.SHARED:
        return spec
    f32 = one.state_float32_bytes // 4 if elem_bytes != 4 else 0
    plain = (one.state_bytes - f32 * 4) // elem_bytes
    state = dict(state_values=plain, state_float32_values=f32, state_known=True)
    k, v = (two.k_bytes - one.k_bytes) // elem_bytes, (two.v_bytes - one.v_bytes) // elem_bytes
    if spec.kind == layout.STATE or not k + v:
        return replace(spec, values_per_token=0, **state) if spec.kind == layout.STATE else replace(spec, **state)
    index = (two.index_bytes - one.index_bytes) // elem_bytes
    held = (one.k_bytes + one.v_bytes) // elem_bytes // (k + v)
    sizes = dict(values_per_token=k + v, index_values=index, fixed_tokens=max(held - PREFILL_TOKENS, 0),
                 kv_heads=1 if spec.kind == layout.LATENT else (two.k_heads or spec.kv_heads))
    if spec.kind == layout.LATENT:
        sizes["latent_rope"] = v
    elif k != (k + v - index) // 2 + index:
        sizes["key_values_per_token"] = k
    return replace(spec, **_window(spec, two.window), **sizes, **state)


def _window(spec: layout.CacheSpec, window: int | None) -> dict:
    """The kind and cap the layer object keeps (its own `sliding_window`), over the config's."""
    if window:
        return dict(kind=spec.kind if spec.kind in (layout.SLIDING, layout.CHUNKED) else layout.SLIDING,
                    token_cap=window)
    if spec.kind in (layout.SLIDING, layout.CHUNKED):
        return dict(kind=layout.FULL, token_cap=None)
    return {}


def _caveat(specs, probed: ProbeRun, elem_bytes: int) -> str:
    """Sentences for what the model's own code does beyond a plain cache (empty when nothing)."""
    words = []
    extra = len(specs) - probed.decoder_layers
    if extra > 0:
        words.append(f"its cache holds {extra} layers beyond its {probed.decoder_layers} decoder layers "
                     f"(its own code appends them, e.g. for looped layers): counted as layers "
                     f"{probed.decoder_layers}–{len(specs) - 1}")
    if probed.module_states:
        names = ", ".join(sorted({s.attr for s in probed.module_states}))
        words.append(f"it keeps state on its own modules ({names}), outside the cache object: "
                     "counted as its layers' state")
    compressed = [s for s in specs if isinstance(s, layout.CompressedSpec)]
    if compressed:
        rates = ", ".join(f"÷{r}" for r in sorted({s.compress_rate for s in compressed}))
        words.append(f"{len(compressed)} of its layers compress their past ({rates}): beside the window each "
                     "keeps one entry per that many tokens, the tokens of the unfinished one and their gates, "
                     "sized from its code and counted in the bytes shown (the trace's layer records hold "
                     "their windows)")
    if any(s.state_family == "rwkv" for s in specs):
        words.append("at batch > 1 its own one-token step with a state computes something else (transformers "
                     "5.24 broadcasts the batch's state across the batch): kvviz decodes a batch sequence by "
                     "sequence, so its tokens are the model's at batch 1, not its own batched generate's")
    fixed = max((s.fixed_tokens for s in specs), default=0)
    if fixed:
        words.append(f"its own code adds {fixed} positions to every sequence's cache")
    if probed.drift > DRIFT_LIMIT.get(elem_bytes, 0.1):
        words.append(f"its cached steps are not the same computation as recomputing: one decode step's "
                     f"logits differ from a full forward's by {probed.drift:.0%} of the largest, so the "
                     "no-cache run may choose other tokens (its own generate does the same with "
                     "use_cache=False)")
    return "; ".join(words)
