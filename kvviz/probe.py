"""The only place that knows the Hugging Face cache object's layout (transformers 5.x).

A `Cache` holds one layer object per decoder layer, each with `.keys` / `.values` tensors of
shape (B, kv_heads, tokens, head_dim). Dynamic layers grow by reallocation; sliding-window
layers keep at most `sliding_window - 1` tokens between steps; static layers preallocate
`max_cache_len` tokens on their first update.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from kvviz.events import LayerStat


@dataclass(frozen=True)
class KVFacts:
    """What the textbook formula needs, read from the model's config."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    windows: tuple[int | None, ...]  # per layer: sliding window, or None for full attention

    def layer_tokens(self, layer: int, tokens: int) -> int:
        """Tokens a dynamic cache keeps for `layer` after `tokens` positions.

        A sliding layer keeps `window - 1` past tokens: with the next token that is the window.
        """
        window = self.windows[layer]
        return tokens if window is None else min(tokens, window - 1)

    def formula_bytes(self, tokens: int, batch: int, elem_bytes: int) -> int:
        """2 x layers x kv_heads x head_dim x tokens x batch x bytes (windows applied per layer)."""
        per_token = 2 * self.num_kv_heads * self.head_dim * batch * elem_bytes
        return sum(per_token * self.layer_tokens(i, tokens) for i in range(self.num_layers))

    def bytes_per_token(self, elem_bytes: int) -> int:
        """Cache bytes one token of one sequence adds across all layers, ignoring windows."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * elem_bytes


def kv_facts(config) -> KVFacts:
    """Layers, KV heads, head_dim and per-layer windows from a transformers config."""
    text = config.get_text_config(decoder=True)
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    n = text.num_hidden_layers
    window = getattr(text, "sliding_window", None)
    types = getattr(text, "layer_types", None) or ["full_attention"] * n
    windows = tuple(window if t == "sliding_attention" and window else None for t in types)
    return KVFacts(n, kv_heads, head_dim, windows)


def tensor_bytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def layer_tokens_held(layer) -> int:
    """Token positions a cache layer holds right now."""
    if not getattr(layer, "is_initialized", False) or layer.keys is None:
        return 0
    if hasattr(layer, "max_cache_len"):  # static: preallocated, filled up to the seq length
        filled = int(layer.get_seq_length())
        return min(filled, layer.keys.shape[-2])
    return layer.keys.shape[-2]


def cache_layer_stats(cache, forward_ms: list[float]) -> tuple[LayerStat, ...]:
    """Per-layer bytes and tokens of a cache, with each layer's forward time attached."""
    stats = []
    for i, layer in enumerate(cache.layers):
        keys = getattr(layer, "keys", None) if layer.is_initialized else None
        values = getattr(layer, "values", None) if layer.is_initialized else None
        ms = forward_ms[i] if i < len(forward_ms) else 0.0
        stats.append(LayerStat(i, tensor_bytes(keys), tensor_bytes(values), layer_tokens_held(layer), ms))
    return tuple(stats)


def empty_layer_stats(forward_ms: list[float]) -> tuple[LayerStat, ...]:
    """Layer stats for a pass that kept no cache (recompute mode): times only."""
    return tuple(LayerStat(i, 0, 0, 0, ms) for i, ms in enumerate(forward_ms))


def is_static(cache) -> bool:
    return any(hasattr(layer, "max_cache_len") for layer in cache.layers)
