"""KV-cache arithmetic and capacity planning, for `kvviz plan` and the Capacity planner page.

Standard library only. Every figure comes from one formula:

    kv_bytes = 2 × layers × kv_heads × head_dim × tokens × batch × bytes_per_element

(the 2 is one K and one V per layer). Refinements, each in its own small function:

* sliding-window layers hold at most `window` tokens, so they count `min(tokens, window)`;
* quantized KV formats (int8, int4) carry one fp16 scale and one fp16 zero point per group of
  `QUANT_GROUP_SIZE` values, spread here as an average overhead per element;
* a GPU's memory goes first to weights and a runtime overhead; what is left holds KV caches, and
  `floor(left / kv_bytes_per_request)` requests fit at once;
* a decode step must read every weight and every cached byte at least once, so
  `(weight_bytes + cache_bytes) / bandwidth` is a lower bound on its time.

Units live in names: `_bytes`, `_s`, `_tokens`, `_per_s`. "GB" in this project means 1e9 bytes.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"

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
    "q8": "int8", "q4": "int4",
}
KV_DTYPES = tuple(_PAYLOAD_BYTES)  # ("fp32", "bf16", "fp16", "fp8", "int8", "int4")
ATTENTION_VARIANTS = ("mha", "gqa", "mqa")
DEFAULT_OVERHEAD_FRACTION = 0.1  # like vLLM's gpu_memory_utilization=0.9: 10 % for the rest


@dataclass(frozen=True)
class KVShape:
    """What the KV formula needs to know about a model, and nothing else."""

    num_layers: int  # decoder layers, each with its own K and V
    num_kv_heads: int  # K/V heads per layer: = attention heads (MHA), fewer (GQA), 1 (MQA)
    head_dim: int  # values per head per token
    num_attention_heads: int  # query heads (for what-ifs and labels only)
    sliding_window: int | None = None  # tokens a sliding layer keeps; None: no sliding layers
    num_sliding_layers: int = 0  # layers that use the window; the others keep every token
    weight_params: int | None = None  # parameter count, when known (weights' memory)
    max_position: int | None = None  # longest context the model was trained for, when known
    name: str = ""  # label for tables and charts

    def __post_init__(self) -> None:
        for field_name in ("num_layers", "num_kv_heads", "head_dim", "num_attention_heads"):
            _require_positive_int(field_name, getattr(self, field_name))
        if self.sliding_window is not None:
            _require_positive_int("sliding_window", self.sliding_window)
        if not 0 <= self.num_sliding_layers <= self.num_layers:
            raise ValueError("num_sliding_layers must be between 0 and num_layers")
        if self.num_sliding_layers and self.sliding_window is None:
            raise ValueError("num_sliding_layers > 0 needs a sliding_window")

    @property
    def num_full_layers(self) -> int:
        """Layers that keep every token (global attention)."""
        return self.num_layers - self.num_sliding_layers

    @property
    def attention_kind(self) -> str:
        """"MHA", "MQA" or "GQA", from the head counts."""
        if self.num_kv_heads == self.num_attention_heads:
            return "MHA"
        return "MQA" if self.num_kv_heads == 1 else "GQA"


def _require_positive_int(field_name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{field_name} must be a positive integer, got {value!r}")


# ---------------------------------------------------------------- parsing Hugging Face configs


def _first(cfg: dict, *keys: str):
    """The value of the first of `keys` present (and not None) in `cfg`, else None."""
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return None


def _need_int(cfg: dict, *keys: str) -> int:
    """The first of `keys` present, checked to be a positive integer; ValueError naming it."""
    present = [key for key in keys if cfg.get(key) is not None]
    if not present:
        raise ValueError(f"config has no {' / '.join(keys)}")
    _require_positive_int(present[0], cfg[present[0]])
    return cfg[present[0]]


def _text_config(cfg: dict) -> dict:
    """Multimodal configs keep the language model's facts in a nested `text_config`."""
    nested = cfg.get("text_config")
    if isinstance(nested, dict) and _first(cfg, "num_hidden_layers", "n_layer") is None:
        return {**{k: v for k, v in cfg.items() if k != "text_config"}, **nested}
    return cfg


def _head_dim(cfg: dict, num_heads: int) -> int:
    if cfg.get("head_dim") is not None:
        return _need_int(cfg, "head_dim")
    if _first(cfg, "hidden_size", "n_embd", "d_model") is None:
        raise ValueError("config has no head_dim, and no hidden_size / n_embd to derive it from")
    return _need_int(cfg, "hidden_size", "n_embd", "d_model") // num_heads


def _num_kv_heads(cfg: dict, num_heads: int) -> int:
    if cfg.get("multi_query") is True:  # Falcon-style MQA flag
        return 1
    if _first(cfg, "num_key_value_heads", "num_kv_heads") is None:
        return num_heads
    return _need_int(cfg, "num_key_value_heads", "num_kv_heads")


def _sliding_layout(cfg: dict, num_layers: int) -> tuple[int | None, int]:
    """(window, number of sliding layers), following transformers 5.x's rules, in order:

    1. `num_sliding_layers` (kvviz's catalog key) is taken as given;
    2. `layer_types`: count the "sliding_attention" entries;
    3. `use_sliding_window` present (Qwen2 family): no window unless it is true; then layers
       i >= max_window_layers (default 28) slide, as Qwen2Config builds `layer_types`;
    4. `sliding_window_pattern` p (Gemma 3; p = 2 implied for model_type "gemma2"): layer i
       slides unless (i + 1) % p == 0, i.e. num_layers - num_layers // p layers slide;
    5. otherwise a non-null `sliding_window` applies to every layer (Mistral v0.1, Phi-3).
    """
    window = cfg.get("sliding_window")
    if cfg.get("num_sliding_layers") is not None:
        count = cfg["num_sliding_layers"]
    elif isinstance(cfg.get("layer_types"), list):
        count = sum(t == "sliding_attention" for t in cfg["layer_types"])
    elif "use_sliding_window" in cfg:
        count = max(0, num_layers - cfg.get("max_window_layers", 28)) if cfg["use_sliding_window"] else 0
    elif _first(cfg, "sliding_window_pattern") or cfg.get("model_type") == "gemma2":
        pattern = cfg.get("sliding_window_pattern") or 2
        count = num_layers - num_layers // pattern
    else:
        count = num_layers if window is not None else 0
    if count and window is None:
        raise ValueError("config has sliding layers but no sliding_window")
    return (window, count) if count else (None, 0)


def kv_shape_from_config(cfg: dict, name: str = "") -> KVShape:
    """Read a Hugging Face `config.json` dict (Llama, Mistral, Qwen2, Gemma 2/3, Phi-3, GPT-2 …).

    Field names tried, in order: num_hidden_layers / n_layer; num_attention_heads / n_head;
    num_key_value_heads (default: attention heads); head_dim (default: hidden_size // heads,
    n_embd for GPT-2). Raises ValueError naming the field when one is missing.
    """
    cfg = _text_config(cfg)
    num_layers = _need_int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    num_heads = _need_int(cfg, "num_attention_heads", "n_head")
    window, num_sliding = _sliding_layout(cfg, num_layers)
    return KVShape(
        num_layers=num_layers,
        num_kv_heads=_num_kv_heads(cfg, num_heads),
        head_dim=_head_dim(cfg, num_heads),
        num_attention_heads=num_heads,
        sliding_window=window,
        num_sliding_layers=num_sliding,
        weight_params=_first(cfg, "num_parameters", "num_params"),
        max_position=_first(cfg, "max_position_embeddings", "n_positions", "n_ctx"),
        name=name or cfg.get("name") or cfg.get("_name_or_path") or "",
    )


# ---------------------------------------------------------------- bytes


def normalize_dtype(dtype: str) -> str:
    """'bfloat16' → 'bf16', 'float8' → 'fp8', …; ValueError for an unknown format."""
    key = str(dtype).strip().lower().removeprefix("torch.")
    key = _DTYPE_ALIASES.get(key, key)
    if key not in _PAYLOAD_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(KV_DTYPES)}")
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


def kv_elements_per_token(shape: KVShape) -> int:
    """Values cached per token over all layers: 2 (K and V) × layers × kv_heads × head_dim."""
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim


def kv_bytes_per_token(shape: KVShape, kv_dtype: str = "bf16") -> int:
    """2 × layers × kv_heads × head_dim × bytes, for one token of one sequence, every layer
    counted (sliding windows ignored: this is the cost of a token while the window is not full)."""
    return math.ceil(kv_elements_per_token(shape) * kv_bytes_per_element(kv_dtype))


def sliding_layer_tokens(tokens: int, window: int) -> int:
    """Tokens a sliding-window layer must hold: min(tokens, window).

    transformers' DynamicSlidingWindowLayer keeps `window - 1` between steps and `window` while a
    step runs; a planner counts the window, as a paged allocator reserving it would.
    """
    return min(tokens, window)


def cached_layer_tokens(shape: KVShape, tokens: int) -> int:
    """Σ over layers of the tokens each holds: full layers T, sliding layers min(T, window)."""
    full = shape.num_full_layers * tokens
    if not shape.num_sliding_layers:
        return full
    return full + shape.num_sliding_layers * sliding_layer_tokens(tokens, shape.sliding_window)


def kv_bytes_for_context(shape: KVShape, tokens: int, kv_dtype: str = "bf16", batch: int = 1) -> int:
    """2 × kv_heads × head_dim × bytes × batch × Σ_layers tokens_held(layer).

    Without sliding layers this is 2 × layers × kv_heads × head_dim × tokens × batch × bytes.
    """
    if tokens < 0 or batch < 0:
        raise ValueError("tokens and batch must be >= 0")
    elements = 2 * shape.num_kv_heads * shape.head_dim * cached_layer_tokens(shape, tokens) * batch
    return math.ceil(elements * kv_bytes_per_element(kv_dtype))


def weight_bytes(params: int, weight_dtype: str = "bf16") -> int:
    """params × bytes per parameter (int8/int4 counted with the same per-group overhead)."""
    if params < 0:
        raise ValueError("params must be >= 0")
    return math.ceil(params * kv_bytes_per_element(weight_dtype))


# ---------------------------------------------------------------- capacity


def runtime_overhead_bytes(gpu_bytes: int, overhead_fraction: float = DEFAULT_OVERHEAD_FRACTION,
                           overhead_bytes: int | None = None) -> int:
    """Memory set aside for activations, CUDA context and fragmentation: `overhead_bytes` when
    given, else `overhead_fraction` × GPU memory."""
    if overhead_bytes is not None:
        return overhead_bytes
    if not 0 <= overhead_fraction < 1:
        raise ValueError("overhead_fraction must be in [0, 1)")
    return math.ceil(gpu_bytes * overhead_fraction)


def kv_budget_bytes(gpu_bytes: int, weight_bytes: int,
                    overhead_fraction: float = DEFAULT_OVERHEAD_FRACTION,
                    overhead_bytes: int | None = None) -> int:
    """GPU memory left for KV caches: gpu − weights − overhead, never negative."""
    overhead = runtime_overhead_bytes(gpu_bytes, overhead_fraction, overhead_bytes)
    return max(0, gpu_bytes - weight_bytes - overhead)


def max_concurrent_requests(shape: KVShape, context_tokens: int, gpu_bytes: int, weight_bytes: int,
                            kv_dtype: str = "bf16",
                            overhead_fraction: float = DEFAULT_OVERHEAD_FRACTION,
                            overhead_bytes: int | None = None) -> int:
    """floor(kv_budget_bytes / kv_bytes_for_context(T)): requests of T tokens that fit at once.

    0 when the weights (plus overhead) do not fit. Each request is assumed to hold its full
    context (no prefix sharing between requests).
    """
    if context_tokens < 1:
        raise ValueError("context_tokens must be >= 1")
    budget = kv_budget_bytes(gpu_bytes, weight_bytes, overhead_fraction, overhead_bytes)
    return budget // kv_bytes_for_context(shape, context_tokens, kv_dtype)


# ---------------------------------------------------------------- bandwidth bounds


def achieved_bandwidth_bytes_per_s(weight_bytes: int, cache_bytes_read: int,
                                   step_ms: float) -> float | None:
    """(weights + cache read) / measured step time: the traffic a decode step must at least cause.

    None for a step of no measured length.
    """
    if step_ms <= 0:
        return None
    return (weight_bytes + cache_bytes_read) / (step_ms / 1000)


def decode_step_floor_s(weight_bytes: int, cache_bytes_read: int, bandwidth_bytes_per_s: float) -> float:
    """(weights + cache read) / bandwidth: no decode step can be faster than reading them once."""
    if bandwidth_bytes_per_s <= 0:
        raise ValueError("bandwidth_bytes_per_s must be > 0")
    return (weight_bytes + cache_bytes_read) / bandwidth_bytes_per_s


def tokens_per_s_ceiling_per_request(step_floor_s: float) -> float:
    """Each request gains one token per decode step: at most 1 / step_floor_s tokens/s."""
    return 1.0 / step_floor_s if step_floor_s > 0 else math.inf


def tokens_per_s_ceiling_aggregate(step_floor_s: float, batch: int) -> float:
    """A step serves the whole batch: at most batch / step_floor_s tokens/s in all."""
    return batch * tokens_per_s_ceiling_per_request(step_floor_s)


# ---------------------------------------------------------------- what-ifs


def what_if_attention(shape: KVShape, variant: str) -> KVShape:
    """The same model with MHA (kv_heads = attention heads), GQA (as configured) or MQA (1)."""
    kind = variant.strip().lower()
    if kind not in ATTENTION_VARIANTS:
        raise ValueError(f"unknown attention variant {variant!r}; use mha, gqa or mqa")
    if kind == "gqa":
        return shape
    kv_heads = shape.num_attention_heads if kind == "mha" else 1
    return replace(shape, num_kv_heads=kv_heads, name=f"{shape.name} as {kind.upper()}".strip())


def what_if_window(shape: KVShape, window: int | None, num_sliding_layers: int | None = None) -> KVShape:
    """The same model with a sliding window on `num_sliding_layers` layers (default: all);
    window None removes every window."""
    if window is None:
        return replace(shape, sliding_window=None, num_sliding_layers=0)
    count = shape.num_layers if num_sliding_layers is None else num_sliding_layers
    return replace(shape, sliding_window=window, num_sliding_layers=count)


# ---------------------------------------------------------------- tables


def capacity_row(shape: KVShape, context_tokens: int, gpu_bytes: int, weight_bytes: int,
                 kv_dtype: str = "bf16", overhead_fraction: float = DEFAULT_OVERHEAD_FRACTION,
                 overhead_bytes: int | None = None, bandwidth_bytes_per_s: float | None = None,
                 batch: int = 1) -> dict:
    """One planner row for context T; bandwidth columns only when a bandwidth is given."""
    per_request = kv_bytes_for_context(shape, context_tokens, kv_dtype)
    fit = max_concurrent_requests(shape, context_tokens, gpu_bytes, weight_bytes, kv_dtype,
                                  overhead_fraction, overhead_bytes)
    row = {"context_tokens": context_tokens, "kv_bytes_per_request": per_request,
           "batch": batch, "kv_bytes_for_batch": per_request * batch,
           "max_concurrent_requests": fit}
    if bandwidth_bytes_per_s:
        row.update(_bandwidth_columns(weight_bytes, per_request, batch, fit, bandwidth_bytes_per_s))
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


def capacity_table(shape: KVShape, contexts=(500, 2000, 8000), gpu_bytes: int = 80 * 10**9,
                   weight_bytes: int = 0, kv_dtype: str = "bf16",
                   overhead_fraction: float = DEFAULT_OVERHEAD_FRACTION,
                   overhead_bytes: int | None = None, bandwidth_bytes_per_s: float | None = None,
                   batch: int = 1) -> list[dict]:
    """One `capacity_row` per context length: "at 500 / 2,000 / 8,000 tokens, N requests fit".

    Columns: context_tokens, kv_bytes_per_request, batch, kv_bytes_for_batch,
    max_concurrent_requests; with a bandwidth also decode_step_floor_s (for `batch` requests),
    tokens_per_s_per_request_ceiling, tokens_per_s_aggregate_ceiling, and the same step floor and
    aggregate ceiling with max_concurrent_requests running (…_at_max).
    """
    return [capacity_row(shape, t, gpu_bytes, weight_bytes, kv_dtype, overhead_fraction,
                         overhead_bytes, bandwidth_bytes_per_s, batch) for t in contexts]


# ---------------------------------------------------------------- shipped catalogs


def _read_asset(filename: str, key: str) -> list[dict]:
    with open(ASSETS_DIR / filename, encoding="utf-8") as f:
        return json.load(f)[key]


def load_catalog() -> list[dict]:
    """Model entries of assets/models.json: Hugging Face config field names plus name, hf_id,
    num_parameters, num_sliding_layers and a source note."""
    return _read_asset("models.json", "models")


def load_gpus() -> list[dict]:
    """GPU presets of assets/gpus.json: name, memory_bytes, bandwidth_bytes_per_s (GB = 1e9 B)."""
    return _read_asset("gpus.json", "gpus")


def _key(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def find_catalog_entry(name: str) -> dict | None:
    """The catalog entry whose name, hf_id or alias matches `name` (case and punctuation ignored)."""
    wanted = _key(name)
    for entry in load_catalog():
        keys = [entry["name"], entry.get("hf_id", ""), *entry.get("aliases", [])]
        if wanted in {_key(k) for k in keys if k}:
            return entry
    return None


def catalog_shape(name: str) -> KVShape:
    """KVShape of a catalog model; ValueError listing the names when there is none."""
    entry = find_catalog_entry(name)
    if entry is None:
        names = ", ".join(e["name"] for e in load_catalog())
        raise ValueError(f"no catalog model named {name!r}; known: {names}")
    return kv_shape_from_config(entry, name=entry["name"])


def find_gpu(name: str) -> dict | None:
    """The GPU preset whose name or alias matches `name` (case and punctuation ignored)."""
    wanted = _key(name)
    for gpu in load_gpus():
        if wanted in {_key(k) for k in [gpu["name"], *gpu.get("aliases", [])]}:
            return gpu
    return None
