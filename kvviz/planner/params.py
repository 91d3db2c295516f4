"""Parameter counts (total, and active per token for MoE) read from a config alone.

The architecture is instantiated on PyTorch's meta device: every tensor has a shape and no
storage, so nothing is allocated and nothing is downloaded. `sum(p.numel())` over the model's
parameters (tied embeddings counted once) is the total; for a mixture of experts the routed
experts' parameters count `num_experts_per_tok / num_experts` of their size in the active count
(shared experts, attention, routers and any vision tower count in full). An input embedding
table that is not tied to the output head is not active: a token reads one row of it (the
published convention — gpt-oss-20b "3.6B active" is 4.19 B less its 0.58 B embedding table);
tied to the head, the head reads all of it each step, so it counts.

Results are cached per config (an lru_cache keyed on the config's canonical JSON): building a
big MoE on meta takes a second or two, and the planner asks again on every rerun.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from kvviz.core.errors import UserError

# Config fields naming the routed experts (E) and the experts each token uses (k), by family:
# DeepSeek / Kimi `n_routed_experts`, Qwen MoE `num_experts`, Mixtral / Llama 4 / gpt-oss /
# Granite `num_local_experts`.
NUM_EXPERTS_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
EXPERTS_PER_TOKEN_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk",
                          "num_experts_per_token")
# A routed expert's parameter: under an `experts` module (fused 3-D weights or a ModuleList),
# never `shared_experts` / `shared_expert`.
_ROUTED_NAME = re.compile(r"(^|\.)experts\.")


class UnknownArchitecture(UserError):
    """transformers cannot build this config (unknown model_type or architecture)."""


@dataclass(frozen=True, kw_only=True)
class ParamCount:
    total: int  # every parameter, tied embeddings once
    active: int  # parameters a token passes through (= total for a dense model)
    num_experts: int | None = None  # routed experts per MoE layer, None for dense
    experts_per_token: int | None = None  # routed experts each token uses
    architecture: str = ""  # the transformers class that was instantiated
    lookup: int = 0  # of total, an untied input embedding table (not in `active`: one row per token)

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None


def _text_fields(cfg: dict) -> dict:
    """Top-level fields, with a nested text_config's on top (multimodal configs)."""
    nested = cfg.get("text_config")
    return {**cfg, **nested} if isinstance(nested, dict) else cfg


def moe_counts(cfg: dict) -> tuple[int | None, int | None]:
    """(routed experts E, experts per token k) from a config.json dict, (None, None) if dense."""
    fields = _text_fields(cfg)
    num = next((fields[k] for k in NUM_EXPERTS_KEYS if isinstance(fields.get(k), int)), None)
    per_token = next((fields[k] for k in EXPERTS_PER_TOKEN_KEYS
                      if isinstance(fields.get(k), int)), None)
    if not num or num < 2 or not per_token:
        return None, None
    return num, min(per_token, num)


def _model_class(config):
    """The class named in config.architectures when transformers has it, else Auto*.from_config."""
    import transformers

    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, name, None)
        if cls is not None and getattr(cls, "config_class", None) is type(config):
            return cls
    return None


def instantiate_on_meta(config):
    """The model for `config` with every tensor on the meta device (no memory, no weights)."""
    import torch
    from transformers import AutoModelForCausalLM

    cls = _model_class(config)
    with torch.device("meta"):
        if cls is not None:
            return cls._from_config(config)
        try:
            return AutoModelForCausalLM.from_config(config)
        except ValueError as err:
            raise UnknownArchitecture(
                f"transformers has no causal LM for model_type {config.model_type!r}") from err


def _is_routed(name: str, shape: tuple, num_experts: int | None) -> bool:
    if num_experts is None:
        return False
    if _ROUTED_NAME.search(name):
        return True
    return len(shape) == 3 and shape[0] == num_experts  # fused experts under another name


@dataclass(frozen=True)
class Tensor:
    """One parameter tensor of the architecture (its shape only; nothing is allocated)."""

    name: str  # as transformers names it, e.g. "model.layers.0.mlp.experts.gate_up_proj"
    shape: tuple[int, ...]
    routed: bool  # a routed expert's weight (counted k / E of its size as active)
    lookup: bool = False  # an input embedding table not tied to the head (one row read per token)

    @property
    def numel(self) -> int:
        n = 1
        for dim in self.shape:
            n *= dim
        return n


def _architecture_only(cfg: dict) -> dict:
    """The config without its quantization_config: the meta model is the architecture alone
    (transformers' quantizers are not involved; kvviz.planner.checkpoint_weights reads that field)."""
    return {k: v for k, v in cfg.items() if k != "quantization_config"}


@lru_cache(maxsize=64)
def _tensors_from_json(config_json: str) -> tuple[str, tuple[Tensor, ...]]:
    from kvviz.core.layout import config_from_dict

    cfg = _architecture_only(json.loads(config_json))
    try:
        config = config_from_dict(cfg)
    except (KeyError, UserError, TypeError) as err:
        raise UnknownArchitecture(str(err)) from err
    num, _ = moe_counts(cfg)
    model = instantiate_on_meta(config)
    lookup = _untied_input_embedding(model)
    tensors = tuple(Tensor(name, tuple(p.shape), _is_routed(name, tuple(p.shape), num), p is lookup)
                    for name, p in model.named_parameters())  # tied tensors yielded once
    return type(model).__name__, tensors


def _untied_input_embedding(model):
    """The input embedding weight when the output head does not share it, else None."""
    try:
        table = model.get_input_embeddings().weight
        head = model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    return None if head is not None and getattr(head, "weight", None) is table else table


def active_share(t: Tensor, num: int | None, per_token: int | None, size: int) -> int:
    """Of `size` (the tensor's parameters or bytes), what one token reads."""
    if t.lookup:
        return 0
    return size * per_token // num if (t.routed and num) else size


def parameter_tensors(cfg: dict) -> tuple[Tensor, ...]:
    """Every parameter tensor of the architecture a config.json dict describes (meta device).

    UnknownArchitecture when transformers does not know it.
    """
    return _tensors_from_json(json.dumps(cfg, sort_keys=True, default=str))[1]


@lru_cache(maxsize=64)
def _count_from_json(config_json: str) -> ParamCount:
    cfg = json.loads(config_json)
    num, per_token = moe_counts(cfg)
    architecture, tensors = _tensors_from_json(config_json)
    total = sum(t.numel for t in tensors)
    active = sum(active_share(t, num, per_token, t.numel) for t in tensors)
    lookup = sum(t.numel for t in tensors if t.lookup)
    return ParamCount(total=total, active=active, num_experts=num, experts_per_token=per_token,
                      architecture=architecture, lookup=lookup)


def parameter_count(cfg: dict) -> ParamCount:
    """Total and active parameters of the architecture a config.json dict describes.

    UnknownArchitecture when transformers does not know it (the caller then asks the user).
    """
    return _count_from_json(json.dumps(cfg, sort_keys=True, default=str))
