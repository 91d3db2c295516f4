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
