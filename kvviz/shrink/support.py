"""Which shrink modes run on a model, and in plain words why not: read from the cache layers
transformers itself builds for the model's config, before any run.

Both shrink kinds assume a full-attention cache, one tensor row per prompt position:
- kvpress 0.5.5 scores a layer's cached keys and keeps the top rows by index. On a sliding-window
  layer the cache holds only the last W positions, so its "positions" are indices into the window
  (a Gemma-3 run wrote 0–30 where 437–467 were kept) and its masks no longer match (every press
  crashes); linear-attention and Mamba layers hold a state, not rows; MLA caches a latent.
- transformers' QuantizedCache refuses any layer type but full attention.
So a mode is offered only for a model whose every cache layer is transformers' `DynamicLayer`, and
(presses) whose decoder layers have the `self_attn.head_dim` and rotary embedding kvpress reads.
The sentence says which layers are what, so a user knows it is the model, not the input.
"""
from __future__ import annotations

import os

from kvviz.core.errors import UserError

FULL = "DynamicLayer"
WHAT = {  # cache layer class -> what its layers hold, in words (plural verb; the singular adds "s")
    "DynamicSlidingWindowLayer": "keep{s} a sliding window",
    "LinearAttentionLayer": "keep{s} a linear-attention / state-space state, not positions",
    "LinearAttentionAndFullAttentionLayer": "mix{es} a state-space state with attention",
    "DummyLayer": "share{s} another layer's cache",
    "DynamicIndexedLayer": "keep{s} an indexed sparse-attention cache",
}


def layer_kinds(model) -> list[str]:
    """The cache layer class transformers builds for each layer of `model` (a DynamicCache)."""
    from transformers import DynamicCache
    try:
        return [type(layer).__name__ for layer in DynamicCache(config=model.config).layers]
    except Exception as exc:  # noqa: BLE001 - a config transformers cannot build a cache for
        return [f"no DynamicCache ({type(exc).__name__})"]


def spans(indices: list[int]) -> str:
    """[0, 1, 2, 4] -> "0–2, 4"."""
    out, start = [], None
    for i, n in enumerate(indices):
        if start is None:
            start = n
        if i + 1 == len(indices) or indices[i + 1] != n + 1:
            out.append(str(start) if start == n else f"{start}–{n}")
            start = None
    return ", ".join(out)


def not_full(kinds: list[str]) -> str:
    """"layers 0–4 keep a sliding window (DynamicSlidingWindowLayer)"; "" when all are full."""
    parts = []
    for kind in dict.fromkeys(k for k in kinds if k != FULL):
        where = [i for i, k in enumerate(kinds) if k == kind]
        one = len(where) == 1
        what = WHAT.get(kind, "{are} not full attention").format(s="s" if one else "", es="es" if one else "",
                                                                 are="is" if one else "are")
        parts.append(f"{'layer' if one else 'layers'} {spans(where)} {what} ({kind})")
    return "; ".join(parts)


def press_refusal(model) -> str:
    """Why kvpress presses are not offered for `model`; "" when they are."""
    odd = not_full(layer_kinds(model))
    if odd:
        return (f"this model's {odd}; kvpress evicts rows of a full-attention cache, so it runs only "
                "on models whose every layer is full attention")
    base = getattr(model, "model", None)
    layers = getattr(base, "layers", None)
    if base is None or layers is None or not hasattr(base, "rotary_emb"):
        return (f"{type(model).__name__} has no `model.layers` with a rotary embedding, which kvpress's "
                "hooks read")
    if not all(hasattr(getattr(layer, "self_attn", None), "head_dim") for layer in layers):
        return (f"the attention of {type(model).__name__} has no `head_dim` (kvpress reads one per head; "
                "multi-head latent attention caches a compressed latent instead)")
    return ""


def quant_refusal(model) -> str:
    """Why transformers' quantized cache is not offered for `model`; "" when it is."""
    odd = not_full(layer_kinds(model))
    if odd:
        return (f"this model's {odd}; transformers' QuantizedCache supports only models whose every "
                "layer is full attention")
    return ""


def refusal(model, mode) -> str:
    """Why `mode` (a compute.ShrinkMode) cannot run on `model`; "" when it can (or shrinks nothing)."""
    if mode.backend:
        return quant_refusal(model)
    if mode.press and mode.press != "none":
        return press_refusal(model)
    return ""


def check(model, mode) -> None:
    """UserError naming why `mode` does not run on `model`."""
    why = refusal(model, mode)
    if why:
        raise UserError(f"{mode.label()} is not offered for this model: {why}")


# ------------------------------------------------------------------ the quality sweep's settings
# Presses kvpress 0.5.5 ships that cannot follow the leaderboard's protocol on transformers 5.24,
# whatever the model: name -> why (measured: kvpress's own pipeline raises the same error).
BROKEN_ON_524 = {
    "PyramidKV": ("it keeps a different number of positions in each layer, and transformers 5.24 builds one "
                  "attention mask for every layer from the first layer's length, so the question's forward fails "
                  "(kvpress's own pipeline raises the same size mismatch)"),
}


def headwise_refusal(model, name: str) -> str:
    """Why press `name` cannot follow the leaderboard's protocol on `model` although its every
    layer is full attention; "" when it can."""
    from kvviz.shrink import presses
    if name in BROKEN_ON_524:
        return BROKEN_ON_524[name]
    attention = getattr(model.config, "_attn_implementation", "")
    if name in presses.HEADWISE and attention == "eager":
        return ("it masks positions per head inside the attention kernel kvpress patches, which kvpress does "
                "not support for eager attention")
    if name == "KVzip":
        folder = str(getattr(model.config, "name_or_path", "") or "")
        if not folder or not any(os.path.exists(os.path.join(folder, f)) for f in ("tokenizer.json", "tokenizer_config.json")):
            return ("it reads the tokenizer from the model's folder (config.name_or_path) and this model was not "
                    "loaded from a folder holding one")
    return ""


def sweep_presses(model) -> tuple[list[str], list]:
    """(the presses the sweep runs on `model`, a sweep.Dropped for each one it cannot, with why)."""
    from kvviz.shrink import presses
    from kvviz.shrink.sweep import Dropped
    offered, refused = presses.offered(presses.ALL_PRESSES)
    everyone = press_refusal(model)
    names, dropped = [], []
    for name in presses.ALL_PRESSES:
        why = everyone or refused.get(name, "") or headwise_refusal(model, name)
        if why:
            dropped.append(Dropped(name, why))
        else:
            names.append(name)
    return names, dropped


def sweep_quant(model) -> tuple[list[tuple[str, int]], list]:
    """(the quantized settings the sweep runs on `model`, a sweep.Dropped for each one it cannot)."""
    from kvviz.shrink import quant_cache
    from kvviz.shrink.sweep import QUANT, Dropped, quant_offered
    backends, refused = quant_cache.available()
    everyone = quant_refusal(model)
    kept = [] if everyone else quant_offered(backends)
    dropped = [Dropped(f"{b} {n}-bit", everyone or refused.get(b, f"{b} offers no {n}-bit packing here"))
               for b, n in QUANT if (b, n) not in kept]
    return kept, dropped
