"""A config's cache layout measured from the architecture's own code, without weights (planner).

The Live page measures the loaded model before a run (`layout_probe`). A pasted config.json has no
weights, so here its architecture is built on PyTorch's meta device (shapes, no memory, bfloat16)
and fed the same two probe tokens: the cache tensors' shapes give each attention layer's sizes as
the run would measure them (Falcon's `num_kv_heads`, indexers shared between layers, keys and
values of different sizes, windows the layer objects keep, cache layers past the decoder count).
A meta forward computes no values, so state kept on modules and the cached-vs-recomputed drift are
not checked here, and state layers keep the config's sizes (the planner's vLLM page rules read the
state's config fields). A config whose meta forward fails keeps its field-name layout, with why.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from kvviz.core import layout
from kvviz.engine import loop
from kvviz.engine import layout_probe

ELEM_BYTES = 2  # the meta model is built in bfloat16 (the MoE kernels refuse float32 inputs on meta)


def measured_layout(config, specs) -> tuple[tuple, str]:
    """(specs with the sizes the architecture's code gives, "") or (specs unchanged, why not)."""
    try:
        model = _on_meta(config)
    except Exception as exc:  # noqa: BLE001 - any architecture's constructor
        return tuple(specs), f"sizes from config fields (the architecture could not be built: {type(exc).__name__})"
    ids = torch.zeros((1, 1), dtype=torch.long, device="meta")
    batch = loop.Batch(ids=ids, mask=torch.ones_like(ids), prompt_len=1)
    probed = layout_probe.measured_specs(specs, loop.probe_run(model, batch, len(specs)), ELEM_BYTES)
    if probed.note:
        return tuple(specs), probed.note
    return tuple(_keep_config_state(s, m) for s, m in zip((*specs, *probed.specs[len(specs):]), probed.specs)), ""


def _on_meta(config):
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()


def _keep_config_state(config_spec, measured):
    """The measured attention sizes with the config's state fields (a state layer: the config's spec)."""
    if config_spec.kind == layout.STATE:
        return config_spec
    return replace(measured, state_values=config_spec.state_values, state_known=config_spec.state_known,
                   state_float32_values=config_spec.state_float32_values)
