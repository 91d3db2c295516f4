"""One context prefill, every setting: the sweep's shortcut, equal to running each press alone.

A kvpress press compresses a layer's cache in a hook that runs after that layer's attention
(`BasePress.forward_hook`): the layer's output, and so every later layer's input, was computed
with the full cache, and the compressed cache is read only by the tokens after the context. So
in a context prefill every press sees the same hidden states, keys and values. `record` runs the
context once with the full cache and keeps each attention layer's inputs; `cache_for` then calls
the press's own `compress` (kvpress's code, unchanged) on them, layer by layer, as its hook
would have, and builds the cache the hook would have left (and, for a head-wise press, the masks
it would have left on the attention modules). A quantized cache gets the keys and values a
prefill would have given it (one `update` per layer). KVzip scores positions by replaying the
context after its prefill: it runs through kvpress's own context manager once per item, and its
other ratios reuse those scores (its `compress_post`, which depends on the ratio only).

tests/shrink/test_protocol.py checks every setting's answer against a run of its own
(`protocol.answer`) and against kvpress's pipeline, token for token.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from kvviz.shrink import presses, protocol


@dataclass(kw_only=True)
class Recorded:
    """The context's full-cache prefill: the cache and each attention layer's hook inputs."""

    prompt: protocol.Prompt
    cache: DynamicCache
    config: object  # the model's config (the layer kinds of a cache built from it)
    kwargs: list[dict] = field(default_factory=list)  # per layer: the attention's keyword inputs
    attentions: list = field(default_factory=list)  # per layer: the attention weights it returned (None: sdpa)
    kvzip: dict = field(default_factory=dict)  # ratio -> KVzip's masks, filled on first use

    @property
    def context_tokens(self) -> int:
        return self.prompt.context_tokens

    def full_cache(self) -> DynamicCache:
        """A fresh cache holding the context's full keys and values (the recorded one stays as is)."""
        return rebuilt(self.config, [(layer.keys, layer.values) for layer in self.cache.layers])


def rebuilt(config, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> DynamicCache:
    """A DynamicCache for `config` holding copies of `layers`' keys and values."""
    cache = DynamicCache(config=config)
    for i, (keys, values) in enumerate(layers):
        cache.update(keys, values, i)
    return cache


def record(lm, prompt: protocol.Prompt) -> Recorded:
    """The context through the model once, full cache, each attention layer's inputs kept."""
    model = lm.model
    cache = DynamicCache(config=model.config)
    out = Recorded(prompt=prompt, cache=cache, config=model.config)
    modules = protocol.attention_modules(model)
    out.kwargs, out.attentions = [None] * len(modules), [None] * len(modules)

    def keep(module, args, kwargs, output):
        i = module.layer_idx
        out.kwargs[i] = {k: v for k, v in kwargs.items() if k not in ("cache", "past_key_values")}
        out.attentions[i] = output[1]

    protocol.clear_masks(model)
    hooks = [m.register_forward_hook(keep, with_kwargs=True) for m in modules]
    try:
        protocol.run_context(model, prompt.context_ids.to(lm.device), cache)
    finally:
        for h in hooks:
            h.remove()
    return out


def prepared(model, press):
    """What `BasePress.__call__` does before it hooks the layers: the press's model-dependent
    setup and the rotary embedding on every attention module."""
    press.post_init_from_model(model)
    for layer in model.model.layers:
        layer.self_attn.rotary_emb = model.model.rotary_emb
    return press


def pressed_cache(lm, rec: Recorded, name: str, ratio: float) -> tuple[DynamicCache, dict]:
    """(the cache a press leaves after the context, its head-wise masks): its `compress` on the
    recorded inputs of every layer, as `BasePress.forward_hook` calls it."""
    model = lm.model
    press = prepared(model, presses.make_press(name, ratio, rec.context_tokens))
    protocol.clear_masks(model)
    layers = []
    try:
        with torch.inference_mode():
            for i, module in enumerate(protocol.attention_modules(model)):
                layer = rec.cache.layers[i]
                kwargs = dict(rec.kwargs[i], past_key_values=rec.cache,
                              cache_position=torch.arange(rec.context_tokens, device=layer.keys.device))
                layers.append(press.compress(module, kwargs["hidden_states"], layer.keys, layer.values,
                                             rec.attentions[i], kwargs))
        found = protocol.masks(model)
    finally:
        protocol.clear_masks(model)
    return rebuilt(rec.config, layers), found


def kvzip_masks(lm, rec: Recorded, ratio: float) -> dict:
    """KVzip's masks at `ratio`: its scores come from one run of kvpress's own KVzip context
    manager on this context (prefill, then the replay that scores); every ratio reuses them."""
    if ratio in rec.kvzip:
        return rec.kvzip[ratio]
    model = lm.model
    if "scores" not in rec.kvzip:
        press = presses.shim(presses.make_press("KVzip", ratio, rec.context_tokens))
        post, kept = press.compress_post, {}

        def keep_scores(m):
            kept["scores"] = press.score_val.clone()  # before compress_post raises the sinks' scores
            post(m)
        press.compress_post = keep_scores
        with torch.inference_mode(), press(model):  # (KVzip's replay runs as the context manager exits)
            protocol.run_context(model, rec.prompt.context_ids.to(lm.device), DynamicCache(config=model.config))
        rec.kvzip["scores"], rec.kvzip["press"] = kept["scores"], press
        rec.kvzip["post"] = post
    press = rec.kvzip["press"]
    press.score_val, press.compression_ratio = rec.kvzip["scores"].clone(), ratio
    protocol.clear_masks(model)
    try:
        with torch.inference_mode():
            rec.kvzip["post"](model)
        rec.kvzip[ratio] = protocol.masks(model)
    finally:
        protocol.clear_masks(model)
        press.score_val = None
    return rec.kvzip[ratio]


def quantized_cache(lm, rec: Recorded, mode):
    """The quantized cache a context prefill leaves: one update per layer with its keys and values."""
    cache = protocol.new_cache(lm.model, mode)
    for i, layer in enumerate(rec.cache.layers):
        cache.update(layer.keys, layer.values, i)
    return cache


def cache_for(lm, rec: Recorded, mode) -> tuple:
    """(cache after the context, head-wise masks) for `mode` (a compute.ShrinkMode), from `rec`."""
    if mode.backend:
        return quantized_cache(lm, rec, mode), {}
    if mode.press == presses.NONE:
        return rec.full_cache(), {}
    if mode.press == "KVzip":
        return rec.full_cache(), kvzip_masks(lm, rec, mode.ratio)
    return pressed_cache(lm, rec, mode.press, mode.ratio)
