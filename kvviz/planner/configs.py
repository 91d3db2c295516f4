"""A config.json (catalog entry, file, pasted text) → the planner's `capacity.ModelKV`.

Layers come from kvviz.core.layout (transformers' own layer-type resolution), parameter counts from
kvviz.planner.params (the architecture built on the meta device). Both are cached: the planner asks
again on every rerun.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import lru_cache

from kvviz.planner import capacity, checkpoint_weights, params
from kvviz.planner.vllm_memory import ModelShape
from kvviz.core import layout
from kvviz.core.errors import UserError


def _known_model_type(model_type: str) -> bool:
    from transformers import CONFIG_MAPPING

    return model_type in CONFIG_MAPPING


def _architecture_model_type(cfg: dict) -> str | None:
    """The model_type of the transformers class named in `architectures`, if there is one."""
    import transformers

    for name in cfg.get("architectures") or []:
        cls = getattr(transformers, str(name), None)
        model_type = getattr(getattr(cls, "config_class", None), "model_type", "")
        if model_type:
            return model_type
    return None


def resolve_model_type(cfg: dict) -> tuple[dict, str | None]:
    """(config, note): a config whose model_type transformers does not know (remote code, e.g.
    Kimi K2's "kimi_k2") but whose `architectures` names a class it has (DeepseekV3ForCausalLM)
    is read as that class's model_type, and the note says so."""
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or _known_model_type(model_type):
        return cfg, None
    known = _architecture_model_type(cfg)
    if known is None:
        return cfg, None
    arch = cfg["architectures"][0]
    return ({**cfg, "model_type": known},
            f"model_type {model_type!r} is remote code; read as {known!r} (architectures: {arch})")


def built_layer_counts(cfg: dict) -> dict[str, int]:
    """The layer counts the architecture itself will build, read the way transformers reads them:
    the config class's own attributes (its attribute_map turns MPT's and DBRX's `n_layers` into
    num_hidden_layers) and every integer field of it and its sub-configs that counts layers
    (Blenderbot's `decoder_layers` / `encoder_layers`, …). Building the config object is cheap;
    building the model is what a huge count makes slow. {} for an architecture transformers
    does not know (the generic reader takes num_hidden_layers / n_layer / num_layers only)."""
    try:
        config = layout.config_from_dict(resolve_model_type(cfg)[0])
    except layout.UnknownModelType:
        return {}
    found = {}
    for sub in _configs_in(config):
        value = getattr(sub, "num_hidden_layers", None)
        if isinstance(value, int) and not isinstance(value, bool):
            found[f"{sub.model_type or 'config'}.num_hidden_layers"] = value
        for key, value in sub.to_diff_dict().items() if hasattr(sub, "to_diff_dict") else ():
            if key.endswith(("layers", "layer")) and isinstance(value, int) and not isinstance(value, bool):
                found[key] = value
    return found


def _configs_in(config) -> list:
    """The config and its sub-configs (text, vision, decoder, …)."""
    subs = [config]
    for key in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, key, None)
        if sub is not None and hasattr(sub, "to_diff_dict"):
            subs.append(sub)
    return subs


def _max_position(text) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        value = getattr(text, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _counts(cfg: dict, given_params: int | None) -> tuple[int | None, int | None, str]:
    if given_params:
        return given_params, given_params, "given"
    try:
        count = params.parameter_count(cfg)
    except params.UnknownArchitecture:
        return None, None, ""
    except Exception as err:  # noqa: BLE001 - a config transformers accepts but cannot build
        return None, None, f"meta-device count failed ({type(err).__name__})"
    source = "meta-device count" + (f", {count.experts_per_token} of {count.num_experts} "
                                    f"experts active" if count.is_moe else "")
    return count.total, count.active, source


def _checkpoint(cfg: dict, source: str) -> dict:
    """The checkpoint's own weight bytes when the meta count ran (not for a given --params)."""
    if not source.startswith("meta-device count"):
        return {}
    try:
        w = checkpoint_weights.checkpoint_weights(cfg)
    except Exception:  # noqa: BLE001 - the count already ran; a failure here only loses bytes
        return {}
    return {"checkpoint_bytes": w.total_bytes, "checkpoint_active_bytes": w.active_bytes,
            "weight_format": w.label}


def _first_int(fields: dict, *keys: str) -> int | None:
    for key in keys:
        value = fields.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"{key} must be a positive integer")
            return value
    return None


def generic_model(cfg: dict, name: str, given_params: int | None) -> capacity.ModelKV:
    """An architecture transformers does not know, read from the generic config fields as
    full-attention layers (num_hidden_layers / n_layer, num_attention_heads / n_head,
    num_key_value_heads, head_dim or hidden_size / heads). Its weights need `given_params`."""
    fields = {**cfg, **cfg["text_config"]} if isinstance(cfg.get("text_config"), dict) else cfg
    layers = _first_int(fields, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first_int(fields, "num_attention_heads", "n_head")
    for field_name, value in (("num_hidden_layers", layers), ("num_attention_heads", heads)):
        if value is None:
            raise UserError(f"config has no {field_name}")
    kv_heads = 1 if fields.get("multi_query") is True else (
        _first_int(fields, "num_key_value_heads", "num_kv_heads") or heads)
    hidden = _first_int(fields, "hidden_size", "n_embd", "d_model")
    head_dim = _first_int(fields, "head_dim") or (hidden // heads if hidden else None)
    if head_dim is None:
        raise UserError("config has no head_dim, and no hidden_size to derive it from")
    model = capacity.uniform_model(layers, kv_heads, head_dim, heads, name, given_params)
    model_type = fields.get("model_type")
    what = f"model_type {model_type!r}" if isinstance(model_type, str) else "a config without model_type"
    note = f"transformers does not know {what}: read as {layers} full-attention layers"
    return replace(model, max_position=_first_int(fields, "max_position_embeddings", "n_positions"),
                   notes=(note,))


@lru_cache(maxsize=64)
def _model_from_json(cfg_json: str, name: str, given_params: int | None, measured: bool) -> capacity.ModelKV:
    cfg, note = resolve_model_type(json.loads(cfg_json))
    try:
        config = layout.config_from_dict(cfg)
    except layout.UnknownModelType:
        return generic_model(cfg, name, given_params)
    specs, sized = _layer_specs(config, measured)
    text = config.get_text_config(decoder=True)
    total, active, source = _counts(cfg, given_params)
    notes = tuple(n for n in (note, sized, "some recurrent state sizes are not modelled (counted as 0)"
                              if layout.unknown_states(specs) else None) if n)
    return capacity.ModelKV(name=name, specs=tuple(specs),
                            num_attention_heads=getattr(text, "num_attention_heads", None) or 1,
                            max_position=_max_position(text), params_total=total,
                            params_active=active, params_source=source, notes=notes,
                            moe=params.moe_counts(cfg)[0] is not None, shape=model_shape(text, cfg),
                            config_json=json.dumps(cfg, sort_keys=True, default=str),
                            **_checkpoint(cfg, source))


def model_shape(text, cfg: dict | None = None) -> ModelShape:
    """The widths vLLM's profile run depends on, from the text config: a dense MLP's intermediate
    size, or one routed expert's and the experts per token (a MoE), and a shared expert's."""
    def positive(name: str) -> int | None:
        value = getattr(text, name, None)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    moe = cfg is not None and params.moe_counts(cfg)[0] is not None
    k = positive("num_experts_per_tok") or positive("experts_per_token") or positive("moe_topk")
    expert = (positive("moe_intermediate_size") or positive("intermediate_size")) if moe else None
    shared = None
    if moe:
        shared = (positive("shared_expert_intermediate_size")
                  or ((positive("n_shared_experts") or 0) * (positive("moe_intermediate_size") or 0)) or None)
        if shared is None and getattr(text, "model_type", "") in ("llama4_text", "llama4"):
            shared = positive("intermediate_size")  # Llama 4's shared expert has the routed one's width
    dense = positive("intermediate_size") if not moe else positive("intermediate_size_mlp")
    return ModelShape(hidden_size=positive("hidden_size"), intermediate_size=dense, vocab_size=positive("vocab_size"),
                      expert_intermediate_size=expert, experts_per_token=k if moe else None,
                      shared_intermediate_size=shared, model_type=str(getattr(text, "model_type", "") or ""))


def _layer_specs(config, measured: bool) -> tuple[tuple, str]:
    """The config's layer specs; `measured`: sized by the architecture's own code on the meta device,
    as the Live page measures a loaded model (kvviz.engine.config_probe), with a note saying which."""
    specs = layout.layer_specs(config)
    if not measured:
        return specs, ""
    from kvviz.engine import config_probe
    sized, why = config_probe.measured_layout(config, specs)
    return sized, why or "layer sizes measured from the architecture's own code (meta device, no weights)"


_FLOAT_SPELLINGS = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def decode_saved_floats(value):
    """Values transformers itself writes for floats JSON cannot hold (bamba / granitemoehybrid
    save `time_step_limit` as [0.0, {"__float__": "Infinity"}]) read back as floats."""
    if isinstance(value, dict):
        if set(value) == {"__float__"} and value["__float__"] in _FLOAT_SPELLINGS:
            return _FLOAT_SPELLINGS[value["__float__"]]
        return {k: decode_saved_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_saved_floats(v) for v in value]
    return value


def model_from_config(cfg: dict, name: str = "", given_params: int | None = None,
                      measured: bool = False) -> capacity.ModelKV:
    """The ModelKV of a config.json dict. UserError (plain words) when it cannot be planned.

    `given_params` replaces the meta-device count (a user's figure for an unknown architecture).
    `measured` sizes each layer by running the architecture's code on the meta device (a pasted or
    local config; the catalog's configs are checked against hand counts and keep field sizes).
    """
    if not isinstance(cfg, dict):
        raise UserError("a model config must be a JSON object")
    cfg = decode_saved_floats(cfg)
    key = json.dumps(cfg, sort_keys=True, default=str)
    return _model_from_json(key, name or str(cfg.get("_name_or_path") or ""), given_params or None, measured)


def catalog_model(name: str) -> capacity.ModelKV:
    """The ModelKV of a catalog model; UserError listing the names when there is none."""
    entry = capacity.find_catalog_entry(name)
    if entry is None:
        names = ", ".join(e["name"] for e in capacity.load_catalog())
        raise UserError(f"no catalog model named {name!r}; known: {names}")
    return model_from_config(capacity.catalog_config(entry), entry["name"])
