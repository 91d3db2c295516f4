"""KV-cache arithmetic and capacity planning, for `kvviz plan` and the Capacity planner page.

The cache's shape is kvviz.core.layout's: one `CacheSpec` per decoder layer (full, sliding, chunked,
latent/MLA, state, shared). Everything here is arithmetic on those specs:

    kv_bytes(T) = Σ_layers values_per_token × tokens_held(layer, T) × bytes_per_value
                  + Σ_state layers fixed state bytes

(`values_per_token` is 2 × kv_heads × head_dim for attention layers: one K and one V per head;
kv_lora_rank + rope dim for a latent layer). Refinements, each in its own small function:

* sliding / chunked layers hold at most their window (layout.layer_tokens_held);
* quantized KV formats (int8, int4) carry one fp16 scale and one fp16 zero point per group of
  `QUANT_GROUP_SIZE` values, spread here as an average overhead per element;
* a GPU's memory goes first to weights and a runtime overhead; what is left holds KV caches, and
  `floor(left / kv_bytes_per_request)` requests fit at once;
* a decode step must read every *active* weight and every cached byte at least once, so
  `(active_weight_bytes + cache_bytes) / bandwidth` is a lower bound on its time.

Units live in names: `_bytes`, `_s`, `_tokens`, `_per_s`. "GB" in this project means 1e9 bytes.
Imports only the standard library and kvviz.core.layout's spec type and helpers (which build on
transformers' config classes); kvviz.planner.configs turns configs into a `ModelKV`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from kvviz.core.layout import CHUNKED, FULL, LATENT, SLIDING, CacheSpec, kinds_summary
from kvviz.core.layout import layer_tokens_held
from kvviz.core.budget import DEFAULT_OVERHEAD_FRACTION, kv_budget_bytes, runtime_overhead_bytes  # noqa: F401
from kvviz.planner.vllm_memory import ModelShape
from kvviz.core.catalog import (catalog_config, find_catalog_entry, find_gpu,  # noqa: F401
                                load_catalog, load_gpus)
from kvviz.core.errors import UserError


# Group-wise quantization as in transformers' QuantizedCache (quanto backend, 5.x defaults:
# nbits=4, q_group_size=64, one scale and one zero point per group, both in the model's
# 16-bit dtype). The cache's residual_length (=128 recent tokens kept in full precision) is
# ignored: it is a constant per layer, negligible at the contexts a planner is asked about.
QUANT_GROUP_SIZE = 64  # values sharing one scale + zero point
QUANT_GROUP_OVERHEAD_BYTES = 4  # fp16 scale (2 B) + fp16 zero point (2 B) per group

_PAYLOAD_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
_GROUP_QUANTIZED = {"int8", "int4"}  # formats that carry per-group scale + zero point
_DTYPE_ALIASES = {
    "float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
    "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "e4m3": "fp8", "e5m2": "fp8",
    # vLLM's name for its fp8 cache of a sparse-MLA latent (DeepSeek-V3.2); serving_plan sizes its page
    "fp8_ds_mla": "fp8",
    "q8": "int8", "q4": "int4",
}
KV_DTYPES = tuple(_PAYLOAD_BYTES)  # ("fp32", "bf16", "fp16", "fp8", "int8", "int4")
ATTENTION_VARIANTS = ("mha", "gqa", "mqa")
ATTENTION_KINDS = (FULL, SLIDING, CHUNKED)  # layers whose K/V heads the what-ifs may change


@dataclass(frozen=True, kw_only=True)
class ModelKV:
    """A model as the planner sees it: its per-layer cache specs and its weights."""

    name: str  # label for tables and charts
    specs: tuple[CacheSpec, ...]  # one per decoder layer (kvviz.core.layout)
    num_attention_heads: int  # query heads (for the MHA what-if and labels)
    max_position: int | None = None  # longest context the model was trained for, when known
    params_total: int | None = None  # every parameter (weights' memory); None: unknown
    params_active: int | None = None  # parameters one token passes through (MoE); else = total
    params_source: str = ""  # where the counts come from, in words
    notes: tuple[str, ...] = field(default=())  # facts worth showing beside the figures
    checkpoint_bytes: int | None = None  # weights as the checkpoint stores them (quantized)
    checkpoint_active_bytes: int | None = None  # of which one token reads (MoE), else = total
    weight_format: str = ""  # the checkpoint's format in words ("mxfp4 experts + bf16")
    moe: bool = False  # routed experts (the config names E and k); else dense
    shape: ModelShape = field(default_factory=ModelShape)  # widths vLLM's profile run depends on
    config_json: str = ""  # the canonical config.json the model was read from ("" for explicit numbers)

    def __post_init__(self) -> None:
        if not self.specs:
            raise UserError("a model needs at least one layer")
        _require_positive_int("num_attention_heads", self.num_attention_heads)

    @property
    def num_layers(self) -> int:
        return len(self.specs)

    @property
    def weight_params(self) -> int | None:
        """Parameters held in memory (all of them; a MoE keeps every expert resident)."""
        return self.params_total

    @property
    def read_params(self) -> int | None:
        """Parameters a decode step must read per token: the active ones (MoE), else all."""
        return self.params_active if self.params_active is not None else self.params_total

    @property
    def attention_kind(self) -> str:
        """"MLA", "MHA", "MQA", "GQA" (from the first attention layer), or "no attention"."""
        if any(s.kind == LATENT for s in self.specs):
            return "MLA"
        heads = [s.kv_heads for s in self.specs if s.kind in ATTENTION_KINDS]
        if not heads:
            return "no attention"
        if heads[0] == self.num_attention_heads:
            return "MHA"
        return "MQA" if heads[0] == 1 else "GQA"

    @property
    def kv_heads(self) -> int:
        """K/V heads of the first attention layer (1 for MLA, 0 without attention)."""
        return next((s.kv_heads for s in self.specs if s.kind in (*ATTENTION_KINDS, LATENT)), 0)

    @property
    def head_dim(self) -> int:
        """Values per head of the first attention layer (latent width for MLA)."""
        spec = next((s for s in self.specs if s.kind in (*ATTENTION_KINDS, LATENT)), None)
        if spec is None:
            return 0
        return spec.values_per_token if spec.kind == LATENT else spec.values_per_token // (2 * spec.kv_heads)

    @property
    def kinds(self) -> str:
        """"30 × full", "52 × sliding 1024, 10 × full"."""
        return kinds_summary(self.specs)

    @property
    def windowed_layers(self) -> int:
        """Layers whose cache is capped (sliding or chunked)."""
        return sum(s.kind in (SLIDING, CHUNKED) for s in self.specs)


def _require_positive_int(field_name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{field_name} must be a positive integer, got {value!r}")


def uniform_model(num_layers: int, num_kv_heads: int, head_dim: int, num_attention_heads: int | None = None,
                  name: str = "custom", params_total: int | None = None) -> ModelKV:
    """A model of `num_layers` full-attention layers (explicit numbers on the command line)."""
    for field_name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads),
                              ("head_dim", head_dim)):
        _require_positive_int(field_name, value)
    spec = CacheSpec(kind=FULL, kv_heads=num_kv_heads, values_per_token=2 * num_kv_heads * head_dim)
    return ModelKV(name=name, specs=(spec,) * num_layers, num_attention_heads=num_attention_heads or num_kv_heads,
                   params_total=params_total, params_active=params_total,
                   params_source="given" if params_total is not None else "")


# ---------------------------------------------------------------- bytes


def normalize_dtype(dtype: str) -> str:
    """'bfloat16' → 'bf16', 'float8' → 'fp8', …; UserError for an unknown format."""
    key = str(dtype).strip().lower().removeprefix("torch.")
    key = _DTYPE_ALIASES.get(key, key)
    if key not in _PAYLOAD_BYTES:
        raise UserError(f"unknown dtype {dtype!r}; use one of {', '.join(KV_DTYPES)}")
    return key


def kv_bytes_per_element(kv_dtype: str) -> float:
    """Average bytes per cached value: fp32 4, bf16/fp16 2, fp8 1, int8 1.0625, int4 0.5625.

    int8 and int4 add QUANT_GROUP_OVERHEAD_BYTES / QUANT_GROUP_SIZE = 4 / 64 = 0.0625 B per value
    for their per-group fp16 scale and zero point. fp8 is taken as a plain 1-byte format (one
    scale per tensor, negligible).
    """
    key = normalize_dtype(kv_dtype)
    overhead = QUANT_GROUP_OVERHEAD_BYTES / QUANT_GROUP_SIZE if key in _GROUP_QUANTIZED else 0.0
    return _PAYLOAD_BYTES[key] + overhead


def state_bytes_per_element(kv_dtype: str) -> float:
    """Recurrent states are not quantized with the KV cache: 4 B in an fp32 run, else 2 B
    (vLLM's mamba_ssm_cache_dtype "auto" follows the model's 16-bit dtype)."""
    return 4.0 if normalize_dtype(kv_dtype) == "fp32" else 2.0


def kv_elements_per_token(model: ModelKV) -> int:
    """Values cached per token over all layers (2 × kv_heads × head_dim per attention layer)."""
    return sum(s.values_per_token for s in model.specs)


def kv_bytes_per_token(model: ModelKV, kv_dtype: str = "bf16") -> int:
    """Bytes one more token adds to one sequence, every layer counted (windows ignored: the cost
    of a token while the windows are not full)."""
    return math.ceil(kv_elements_per_token(model) * kv_bytes_per_element(kv_dtype))


def layer_kind_bytes_per_token(model: ModelKV, kv_dtype: str = "bf16") -> dict[str, int]:
    """Bytes per token per layer kind, summed over the layers of that kind: {"full": …, …}."""
    per_value = kv_bytes_per_element(kv_dtype)
    out: dict[str, int] = {}
    for spec in model.specs:
        out[spec.kind] = out.get(spec.kind, 0) + spec.values_per_token
    return {kind: math.ceil(values * per_value) for kind, values in out.items()}


def state_bytes_per_request(model: ModelKV, kv_dtype: str = "bf16") -> int:
    """Fixed bytes one sequence holds in recurrent / conv states, whatever its length."""
    values = sum(s.state_values for s in model.specs)
    f32_values = sum(s.state_float32_values for s in model.specs)
    return math.ceil(values * state_bytes_per_element(kv_dtype) + f32_values * 4)


def cached_layer_tokens(model: ModelKV, tokens: int) -> int:
    """Σ over layers of values_per_token × tokens held: full layers T, windowed min(T, W − 1)."""
    return sum(s.values_per_token * layer_tokens_held(s, tokens) for s in model.specs)


def kv_bytes_for_context(model: ModelKV, tokens: int, kv_dtype: str = "bf16", batch: int = 1) -> int:
    """Bytes `batch` sequences of `tokens` tokens hold: KV of every layer plus fixed states.

    Without windows or states this is 2 × layers × kv_heads × head_dim × tokens × batch × bytes.
    """
    if tokens < 0 or batch < 0:
        raise UserError("tokens and batch must be >= 0")
    kv = math.ceil(cached_layer_tokens(model, tokens) * batch * kv_bytes_per_element(kv_dtype))
    return kv + (state_bytes_per_request(model, kv_dtype) * batch if tokens else 0)


def shareable_prefix_bytes(model: ModelKV, prefix_tokens: int, kv_dtype: str = "bf16") -> int:
    """Bytes of a shared prefix that many requests can point at (modelled): the prefix's K/V in
    full and latent layers. Windowed layers drop the prefix once a request passes the window and
    states are per request, so neither is counted as shared."""
    values = sum(s.values_per_token for s in model.specs if s.kind in (FULL, LATENT))
    return math.ceil(values * prefix_tokens * kv_bytes_per_element(kv_dtype))


def weight_bytes(params: int, weight_dtype: str = "bf16") -> int:
    """params × bytes per parameter (int8/int4 counted with the same per-group overhead)."""
    if params < 0:
        raise UserError("params must be >= 0")
    return math.ceil(params * kv_bytes_per_element(weight_dtype))


# ---------------------------------------------------------------- capacity


def max_concurrent_requests(model: ModelKV, context_tokens: int, gpu_bytes: int, weight_bytes: int,
                            kv_dtype: str = "bf16",
                            overhead_fraction: float = DEFAULT_OVERHEAD_FRACTION,
                            overhead_bytes: int | None = None) -> int:
    """floor(kv_budget_bytes / kv_bytes_for_context(T)): requests of T tokens that fit at once.

    0 when the weights (plus overhead) do not fit. Each request is assumed to hold its full
    context (no prefix sharing between requests).
    """
    if context_tokens < 1:
        raise UserError("context_tokens must be >= 1")
    budget = kv_budget_bytes(gpu_bytes, weight_bytes, overhead_fraction, overhead_bytes)
    return budget // kv_bytes_for_context(model, context_tokens, kv_dtype)


def requests_with_shared_prefix(budget_bytes: int, per_request_bytes: int, shared_bytes: int) -> int:
    """Requests that fit when `shared_bytes` of each are one prefix stored once (modelled):
    floor((budget − shared) / (per request − shared))."""
    own = per_request_bytes - shared_bytes
    if own <= 0:
        raise UserError("the shared prefix must be shorter than the context")
    return 0 if budget_bytes < shared_bytes else (budget_bytes - shared_bytes) // own


# ---------------------------------------------------------------- bandwidth bounds


def decode_step_floor_s(weight_bytes: int, cache_bytes_read: int, bandwidth_bytes_per_s: float) -> float:
    """(weights + cache read) / bandwidth: no decode step can be faster than reading them once."""
    if bandwidth_bytes_per_s <= 0:
        raise UserError("bandwidth_bytes_per_s must be > 0")
    return (weight_bytes + cache_bytes_read) / bandwidth_bytes_per_s


def tokens_per_s_ceiling_per_request(step_floor_s: float) -> float:
    """Each request gains one token per decode step: at most 1 / step_floor_s tokens/s."""
    return 1.0 / step_floor_s if step_floor_s > 0 else math.inf


def tokens_per_s_ceiling_aggregate(step_floor_s: float, batch: int) -> float:
    """A step serves the whole batch: at most batch / step_floor_s tokens/s in all."""
    return batch * tokens_per_s_ceiling_per_request(step_floor_s)


# ---------------------------------------------------------------- what-ifs


def _with_kv_heads(spec: CacheSpec, kv_heads: int) -> CacheSpec:
    head_dim = spec.values_per_token // (2 * spec.kv_heads)
    return replace(spec, kv_heads=kv_heads, values_per_token=2 * kv_heads * head_dim)


def what_if_attention(model: ModelKV, variant: str) -> ModelKV:
    """The same model with MHA (kv_heads = attention heads), GQA (as configured) or MQA (1) in
    every full / sliding / chunked layer (latent, state and shared layers are left as they are)."""
    kind = variant.strip().lower()
    if kind not in ATTENTION_VARIANTS:
        raise UserError(f"unknown attention variant {variant!r}; use mha, gqa or mqa")
    if kind == "gqa":
        return model
    heads = model.num_attention_heads if kind == "mha" else 1
    specs = tuple(_with_kv_heads(s, heads) if s.kind in ATTENTION_KINDS and s.kv_heads else s
                  for s in model.specs)
    return replace(model, specs=specs, name=f"{model.name} as {kind.upper()}".strip())


def what_if_window(model: ModelKV, window: int | None, name: str = "the what-if window") -> ModelKV:
    """The same model with a sliding window of `window` tokens on every attention layer (full,
    sliding, chunked); window None turns every windowed layer into a full one. UserError naming
    the window as `name` does (the CLI passes its flag)."""
    if window is None:
        specs = tuple(replace(s, kind=FULL, token_cap=None) if s.kind in (SLIDING, CHUNKED) else s
                      for s in model.specs)
    else:
        if isinstance(window, bool) or not isinstance(window, int) or window < 2:
            raise UserError(f"{name} must be at least 2 tokens (a window of 1 keeps no past token, "
                            "so there would be no cache to plan)")
        specs = tuple(replace(s, kind=SLIDING, token_cap=window) if s.kind in ATTENTION_KINDS else s
                      for s in model.specs)
    return replace(model, specs=specs)


# ---------------------------------------------------------------- tables


def capacity_row(model: ModelKV, context_tokens: int, gpu_bytes: int, weight_bytes: int,
                 kv_dtype: str = "bf16", overhead_fraction: float = DEFAULT_OVERHEAD_FRACTION,
                 overhead_bytes: int | None = None, bandwidth_bytes_per_s: float | None = None,
                 batch: int = 1, read_weight_bytes: int | None = None) -> dict:
    """One planner row for context T; bandwidth columns only when a bandwidth is given.

    `read_weight_bytes`: the weights a decode step reads (the active ones of a MoE); default all.
    """
    per_request = kv_bytes_for_context(model, context_tokens, kv_dtype)
    fit = max_concurrent_requests(model, context_tokens, gpu_bytes, weight_bytes, kv_dtype,
                                  overhead_fraction, overhead_bytes)
    row = {"context_tokens": context_tokens, "kv_bytes_per_request": per_request,
           "batch": batch, "kv_bytes_for_batch": per_request * batch,
           "max_concurrent_requests": fit}
    if bandwidth_bytes_per_s:
        read = weight_bytes if read_weight_bytes is None else read_weight_bytes
        row.update(_bandwidth_columns(read, per_request, batch, fit, bandwidth_bytes_per_s))
    return row


def _bandwidth_columns(weight_bytes: int, per_request_bytes: int, batch: int, fit: int,
                       bandwidth_bytes_per_s: float) -> dict:
    step_s = decode_step_floor_s(weight_bytes, per_request_bytes * batch, bandwidth_bytes_per_s)
    full_s = decode_step_floor_s(weight_bytes, per_request_bytes * fit, bandwidth_bytes_per_s)
    return {"decode_step_floor_s": step_s,
            "tokens_per_s_per_request_ceiling": tokens_per_s_ceiling_per_request(step_s),
            "tokens_per_s_aggregate_ceiling": tokens_per_s_ceiling_aggregate(step_s, batch),
            "decode_step_floor_s_at_max": full_s if fit else None,
            "tokens_per_s_aggregate_ceiling_at_max":
                tokens_per_s_ceiling_aggregate(full_s, fit) if fit else 0.0}


