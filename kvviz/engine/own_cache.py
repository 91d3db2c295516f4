"""Caches a model keeps in objects of its own, not a transformers `Cache` of layers (transformers 5.24).

- xLSTM: its modeling module's `xLSTMCache`, passed as `cache=`, built for a batch size; per block
  an mLSTM state (C: heads × qk × v, n: heads × qk, m: heads) in `rnn_state`, in the model's dtype.
- RWKV: a list of five (batch, hidden, layers) tensors passed as `state=` and returned as
  `out.state` (two in the model's dtype, three float32); kvviz holds it in a `StateList` between
  steps, as `model.generate` holds it in its keyword arguments.

RWKV's one-token step reads its shift state as (batch, hidden) against a (batch, 1, hidden) input,
so at batch > 1 it broadcasts to (batch, batch, hidden) and computes something else (transformers
5.24, `RwkvSelfAttention.extract_key_value` / `RwkvFeedForward.forward`). kvviz runs those steps one
sequence at a time on views of the batch's state (the model writes its state in place), which is
the computation the model does at batch 1.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import torch


@dataclass
class StateList:
    """RWKV's state between steps: None before the prefill, then the model's own list."""

    state: list | None = None


def keeps_state(model) -> bool:
    """Whether the model carries its state through `state=` (RWKV) rather than a cache argument."""
    return type(model).__name__.startswith("Rwkv")


def make(model, batch: int):
    """The model's own cache object for `batch` sequences, or None (a transformers Cache will do)."""
    if keeps_state(model):
        return StateList()
    own = _xlstm_cache_class(model)
    if own is None:
        return None
    weight = next(model.parameters())
    return own(config=model.config, max_batch_size=batch, dtype=weight.dtype, device=weight.device)


def _xlstm_cache_class(model):
    """The `xLSTMCache` of the model's modeling module, when it has one."""
    module = sys.modules.get(type(model).__module__)
    own = getattr(module, "xLSTMCache", None)
    return own if isinstance(own, type) else None


def inputs(cache) -> dict:
    """What the forward takes for this cache: `state=` for a StateList, else `cache=`."""
    if isinstance(cache, StateList):
        return {"state": cache.state} if cache.state is not None else {}
    return {"cache": cache} if cache is not None else {}


def state_forward(model, inputs: dict, holder: StateList):
    """One RWKV forward with its state; a one-token step at batch > 1 runs sequence by sequence
    on views of the batch's state. Keeps the returned state in `holder`; returns the logits."""
    ids, state = inputs["input_ids"], holder.state
    rest = {k: v for k, v in inputs.items() if k not in ("input_ids", "state", "attention_mask", "use_cache")}
    rest["use_cache"] = True
    with torch.inference_mode():
        if state is None or ids.shape[1] != 1 or ids.shape[0] == 1:
            out = model(input_ids=ids, state=state, **rest)
            holder.state = out.state
            return out.logits
        rows = [model(input_ids=ids[b:b + 1], state=[s[b:b + 1] for s in state], **rest).logits
                for b in range(ids.shape[0])]
    return torch.cat(rows, dim=0)


def layer_states(cache, num_layers: int) -> list[list[torch.Tensor]] | None:
    """Each layer's state tensors in a model's own cache, or None for a transformers Cache."""
    if isinstance(cache, StateList):
        state = cache.state or []
        return [[s[:, :, i] for s in state] for i in range(num_layers)]
    rnn = getattr(cache, "rnn_state", None)
    if isinstance(rnn, dict) and getattr(cache, "layers", None) is None:
        return [list(rnn.get(i, ())) for i in range(num_layers)]
    return None
