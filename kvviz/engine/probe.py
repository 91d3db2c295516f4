"""The only place that reads the Hugging Face cache object (transformers 5.x): bytes per layer.

A `Cache` holds one layer object per decoder layer. What each keeps is modelled in
`kvviz.core.layout`; this module measures it, two ways:

- logical bytes: numel × element size of the tensors the layer keeps (K, V, and the conv /
  recurrent states of linear-attention layers);
- storage bytes: the allocations those tensors pin, each underlying storage counted once (by
  data pointer). They differ when a tensor is a view of a larger buffer: a sliding-window layer
  keeps a slice of the freshly concatenated keys (W − 1 of W tokens, or of the whole prompt right
  after a long prefill).

Layer classes read (exactly these, see READABLE): DynamicLayer, DynamicSlidingWindowLayer,
DynamicIndexedLayer (DeepSeek-V3.2: its indexer keys are counted with the keys), the
static layers, LinearAttentionLayer and the hybrid linear + attention layers, DummyLayer (a layer
that reuses another layer's KV: it holds nothing), and MiniMax's own cache (its `linear_cache`
beside plain dynamic layers), the layer classes a model's module defines that MODEL_LAYERS names
(MiniMax-M3's sparse layers with their indexer keys, DeepSeek-V4's compressed layers with their
compressor's tensors), and the state objects of kvviz.engine.own_cache (xLSTM, RWKV). Any other
layer class raises `UnreadableCache` naming it, and the engine shows the run without cache bytes
rather than wrong ones. A layer whose `values` is its `keys` (DeepSeek-V4) counts the tensor once.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
from transformers.cache_utils import (CacheLayerMixin, DummyLayer, DynamicIndexedLayer, DynamicLayer,
                                      DynamicSlidingWindowLayer,
                                      LinearAttentionAndFullAttentionLayer,
                                      LinearAttentionAndSlidingWindowAttentionLayer,
                                      LinearAttentionAndStaticFullAttentionLayer,
                                      LinearAttentionAndStaticSlidingWindowAttentionLayer,
                                      LinearAttentionCacheLayerMixin, LinearAttentionLayer, StaticLayer,
                                      StaticSlidingWindowLayer)

from kvviz.core import layout
from kvviz.core.events import LayerStat
from kvviz.engine import own_cache
from kvviz.core.errors import KvvizError


# Exactly these classes: a subclass (a model's own layer, a quantized or indexed layer) may keep
# tensors elsewhere, and guessing would show wrong bytes as measured.
READABLE = (DynamicLayer, DynamicSlidingWindowLayer, DynamicIndexedLayer, StaticLayer, StaticSlidingWindowLayer,
            LinearAttentionLayer, LinearAttentionAndFullAttentionLayer,
            LinearAttentionAndSlidingWindowAttentionLayer, LinearAttentionAndStaticFullAttentionLayer,
            LinearAttentionAndStaticSlidingWindowAttentionLayer, DummyLayer)


# Layer classes a model's own modeling module defines (registered by their `_layer_type`), read by
# class name: each is a plain layer of READABLE's kind plus (1) tensor attributes holding indexer
# keys, counted with the keys as DynamicIndexedLayer's are (MiniMax-M3's sparse layers: `idx_keys`),
# and (2) dicts of tensors a compressor keeps (DeepSeek-V4's compressed entries, buffered
# projections and gates, overlap halves), counted as the layer's compressor bytes.
_V4_COMPRESSOR = ("compressed_kv", "buffer_kv", "buffer_gate", "overlap_kv", "overlap_gate")
MODEL_LAYERS = {"MiniMaxM3VLSparseCacheLayer": (DynamicLayer, ("idx_keys",), ()),
                "MiniMaxM3VLSparseStaticCacheLayer": (StaticLayer, ("idx_keys",), ()),
                "DeepseekV4HCACache": (DynamicSlidingWindowLayer, (), _V4_COMPRESSOR),
                "DeepseekV4CSACache": (DynamicSlidingWindowLayer, (), _V4_COMPRESSOR)}


class UnreadableCache(KvvizError):
    """A cache layer class kvviz cannot read; the message names the class."""


@dataclass(kw_only=True)
class LayerBytes:
    """What one cache layer holds right now."""

    k_bytes: int = 0
    v_bytes: int = 0
    state_bytes: int = 0  # conv + recurrent states (linear-attention / state-space layers)
    state_float32_bytes: int = 0  # the part of state_bytes held in float32 tensors
    tokens: int = 0  # token positions of K/V held
    k_heads: int = 0  # heads of the keys tensor ([batch, heads, seq, dim]), 0 if not 4-D
    index_bytes: int = 0  # of k_bytes, sparse-attention indexer keys (DeepSeek-V3.2-style layers)
    window: int | None = None  # the window a sliding / chunked layer object keeps (its own attribute)
    compressor_bytes: int = 0  # what a compressor keeps besides K/V (DeepSeek-V4: kvviz.core.spec.CompressedSpec)
    storages: dict[int, int] = field(default_factory=dict)  # data pointer -> storage bytes


def tensor_bytes(t) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def _pin(storages: dict[int, int], t) -> None:
    if isinstance(t, torch.Tensor) and t.numel():
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()


def _read_kv(layer, out: LayerBytes, kind: LayerKind) -> None:
    if not getattr(layer, "is_initialized", False):
        return
    keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
    out.k_bytes, out.v_bytes = tensor_bytes(keys), tensor_bytes(values) if values is not keys else 0
    out.tokens = keys.shape[-2] if isinstance(keys, torch.Tensor) and keys.dim() >= 2 else 0
    out.k_heads = keys.shape[1] if isinstance(keys, torch.Tensor) and keys.dim() == 4 else 0
    if kind.static:  # preallocated: filled up to the sequence length
        out.tokens = min(int(layer.get_seq_length()), out.tokens)
    _pin(out.storages, keys)
    _pin(out.storages, values)
    out.window = getattr(layer, "sliding_window", None)
    _read_index(layer, kind.index, out)  # sparse-attention indexer keys count as keys
    for states in (getattr(layer, a, None) or {} for a in kind.compressor):
        for t in states.values():
            out.compressor_bytes += tensor_bytes(t)
            _pin(out.storages, t)


def _read_index(layer, attrs, out: LayerBytes) -> None:
    """Indexer keys kept beside K and V: counted with the keys, and as index bytes."""
    for t in (getattr(layer, a, None) for a in attrs):
        out.k_bytes += tensor_bytes(t)
        out.index_bytes += tensor_bytes(t)
        _pin(out.storages, t)


def _read_states(layer, out: LayerBytes) -> None:
    for states in (layer.conv_states, layer.recurrent_states):
        for t in states.values():
            out.state_bytes += tensor_bytes(t)
            out.state_float32_bytes += tensor_bytes(t) if getattr(t, "dtype", None) == torch.float32 else 0
            _pin(out.storages, t)


def _read_tensors(tensors) -> LayerBytes:
    """A layer of a model's own state object: every tensor is state."""
    out = LayerBytes()
    for t in tensors:
        out.state_bytes += tensor_bytes(t)
        out.state_float32_bytes += tensor_bytes(t) if getattr(t, "dtype", None) == torch.float32 else 0
        _pin(out.storages, t)
    return out


def read_layer(layer) -> LayerBytes:
    """Bytes, tokens and pinned storages of one cache layer; UnreadableCache for unknown classes."""
    try:
        return _read_layer(layer)
    except (AttributeError, TypeError, RuntimeError) as exc:
        raise UnreadableCache(f"kvviz cannot read cache layers of class {type(layer).__name__} "
                              f"({type(exc).__name__}: {exc})") from exc


@dataclass(frozen=True, kw_only=True)
class LayerKind:
    """What `read_layer` reads from a cache layer class: decided once per class (the same for every
    layer of it, every step)."""

    readable: bool  # in READABLE, or a MODEL_LAYERS class of its kind
    dummy: bool  # holds nothing (reuses another layer's KV)
    states: bool  # conv / recurrent states (LinearAttentionCacheLayerMixin)
    kv: bool  # keys and values (CacheLayerMixin)
    static: bool  # preallocated (StaticLayer): filled up to its sequence length
    index: tuple[str, ...]  # attributes holding indexer keys, counted with the keys
    compressor: tuple[str, ...]  # attributes holding a compressor's dicts of tensors


@functools.cache
def layer_kind(cls: type) -> LayerKind:
    known = MODEL_LAYERS.get(cls.__name__)
    index = ("indexer_keys", "indexer_position_ids") if issubclass(cls, DynamicIndexedLayer) else ()
    return LayerKind(readable=cls in READABLE or bool(known and issubclass(cls, known[0])),
                     dummy=issubclass(cls, DummyLayer), states=issubclass(cls, LinearAttentionCacheLayerMixin),
                     kv=issubclass(cls, CacheLayerMixin), static=issubclass(cls, StaticLayer),
                     index=index + (known[1] if known else ()), compressor=known[2] if known else ())


def _read_layer(layer) -> LayerBytes:
    out = LayerBytes()
    kind = layer_kind(type(layer))
    if not kind.readable:
        raise UnreadableCache(f"kvviz cannot read cache layers of class {type(layer).__name__}")
    if kind.dummy:
        return out
    if kind.states:
        _read_states(layer, out)
    if kind.kv:
        _read_kv(layer, out, kind)
    return out


def read_cache(cache, num_layers: int, beyond: bool = False) -> list[LayerBytes]:
    """One LayerBytes per decoder layer (MiniMax's `linear_cache` counted as state); with `beyond`,
    also every cache layer past the decoder count (a looped model's copies of its layers)."""
    if cache is None:
        raise UnreadableCache("the model returned no cache object")
    own = own_cache.layer_states(cache, num_layers)
    if own is not None:  # xLSTM's rnn_state, RWKV's state list: states only
        return [_read_tensors(tensors) for tensors in own]
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise UnreadableCache(f"kvviz cannot read caches of class {type(cache).__name__}")
    read = [read_layer(layer) for layer in (layers if beyond else layers[:num_layers])]
    read += [LayerBytes() for _ in range(num_layers - len(read))]
    for i, state in enumerate(getattr(cache, "linear_cache", None) or []):
        if isinstance(state, torch.Tensor) and i < num_layers:
            read[i].state_bytes += tensor_bytes(state)
            read[i].state_float32_bytes += tensor_bytes(state) if state.dtype == torch.float32 else 0
            _pin(read[i].storages, state)
    return read


@dataclass(frozen=True)
class ModuleState:
    """A tensor a model keeps as a plain attribute of one of its modules and rewrites every decode
    step (RecurrentGemma's conv and recurrent states): cache the cache object never holds."""

    layer: int  # the decoder layer the module sits in (0 when no decoder-layer list was found)
    module: torch.nn.Module
    attr: str


def module_tensors(model: torch.nn.Module) -> dict[tuple[int, str], torch.Tensor]:
    """Every tensor kept as a plain attribute of a module (not a parameter or buffer), copied."""
    return {(id(m), attr): v.clone() for m in model.modules() for attr, v in vars(m).items()
            if isinstance(v, torch.Tensor)}


def changed_module_states(model: torch.nn.Module, before: dict, layers) -> tuple[ModuleState, ...]:
    """The plain tensor attributes that a step replaced or rewrote since `before` was taken."""
    owner = {id(m): i for i, layer in enumerate(layers) for m in layer.modules()}
    found = []
    for m in model.modules():
        for attr, v in vars(m).items():
            old = before.get((id(m), attr))
            if isinstance(v, torch.Tensor) and v.numel() and (old is None or old.shape != v.shape
                                                             or not torch.equal(old, v)):
                found.append(ModuleState(owner.get(id(m), 0), m, attr))
    return tuple(found)


def add_module_states(read: list[LayerBytes], states) -> list[LayerBytes]:
    """`read` with each module state's bytes counted as its layer's state (in place; returned)."""
    for s in states:
        t = getattr(s.module, s.attr, None)
        if isinstance(t, torch.Tensor) and s.layer < len(read):
            read[s.layer].state_bytes += tensor_bytes(t)
            read[s.layer].state_float32_bytes += tensor_bytes(t) if t.dtype == torch.float32 else 0
            _pin(read[s.layer].storages, t)
    return read


def held_module_states(states) -> list:
    """The tensors the module states hold now (to put back with `restore_module_states`)."""
    return [getattr(s.module, s.attr, None) for s in states]


def restore_module_states(states, held: list) -> None:
    """Put a run's module states back: in a race the no-cache run's forwards rewrite them too."""
    for s, t in zip(states, held):
        setattr(s.module, s.attr, t)


def storage_bytes(read: list[LayerBytes]) -> int:
    """Bytes the whole cache pins, each storage once even when layers share it."""
    pinned: dict[int, int] = {}
    for r in read:
        pinned.update(r.storages)
    return sum(pinned.values())


def cache_layer_stats(read: list[LayerBytes], specs, tokens: int, batch: int, elem_bytes: int,
                      forward_ms: list[float]) -> tuple[LayerStat, ...]:
    """Per-layer measured bytes beside the layout's formula, with each layer's forward time."""
    stats = []
    for i, (r, spec) in enumerate(zip(read, specs)):
        ms = forward_ms[i] if i < len(forward_ms) else 0.0
        formula = layout.layer_formula_bytes(spec, tokens, batch, elem_bytes)
        stats.append(LayerStat(layer=i, k_bytes=r.k_bytes, v_bytes=r.v_bytes, tokens=r.tokens, forward_ms=ms, state_bytes=r.state_bytes + r.compressor_bytes,
                               storage_bytes=sum(r.storages.values()), formula_bytes=formula))
    return tuple(stats)


def empty_layer_stats(forward_ms: list[float]) -> tuple[LayerStat, ...]:
    """Layer stats for a pass that kept no cache (recompute mode): times only."""
    return tuple(LayerStat(layer=i, k_bytes=0, v_bytes=0, tokens=0, forward_ms=ms) for i, ms in enumerate(forward_ms))


def is_static(cache) -> bool:
    return any(isinstance(layer, StaticLayer) for layer in getattr(cache, "layers", ()))
