"""Pure reshapers for the Capacity planner page: kvviz.capacity results in, DataFrames out.

All arithmetic is kvviz.capacity's; this module only picks the inputs (contexts, what-if
variants), calls it, and lays the answers out as long-form frames whose column names are
capacity's own (`context_tokens`, `kv_bytes_per_request`, `max_concurrent_requests`, …), so
the same names run on into the chart encodings (kvviz/planner_charts.py).

Standard library, pandas and kvviz.capacity only: no streamlit, no torch.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import pandas as pd

from kvviz import capacity

PLANNER_KV_DTYPES = ("fp32", "bf16", "fp8", "int8", "int4")  # fp16 costs what bf16 costs
TABLE_CONTEXTS = (500, 2000, 8000)  # "at 500 / 2,000 / 8,000 tokens: N requests"
CURVE_MIN_TOKENS = 256  # left end of the requests-vs-context curve
CURVE_POINTS_PER_OCTAVE = 4  # samples per doubling of the context
DEFAULT_MAX_CONTEXT = 131_072  # right end when the model does not say its max position

# A rough count of what one decode step launches, for the "where the time goes" note. A
# torch.profiler trace of one decode step of a transformers 5.x Llama (sdpa, eager PyTorch,
# counted on CPU) shows about 35-40 compute ops per decoder layer: 7 matmuls, attention, two
# RMSNorms of several ops each, rotary embedding, residual adds, the cache append. 30 is a
# round, slightly conservative figure. The launch cost is an assumption, not a measurement:
# a few µs of CUDA driver time plus PyTorch's eager dispatch per op.
KERNELS_PER_LAYER = 30  # assumed GPU kernels per decoder layer per decode step (eager)
LAUNCH_S = 5e-6  # assumed CPU-side cost to launch one kernel (eager PyTorch), seconds
BOUND_MARGIN = 2.0  # one side must exceed the other this many times to be called the bound

# Integer-valued config fields kvviz.capacity reads; checked here first so that an error
# message never has to quote (untrusted) pasted text back.
_INT_FIELDS = (
    "num_hidden_layers", "n_layer", "num_layers", "num_attention_heads", "n_head",
    "num_key_value_heads", "num_kv_heads", "head_dim", "hidden_size", "n_embd", "d_model",
    "sliding_window", "num_sliding_layers", "max_window_layers", "sliding_window_pattern",
    "max_position_embeddings", "n_positions", "n_ctx", "num_parameters", "num_params",
)
_JSON_TYPE_NAMES = {str: "a string", bool: "true/false", float: "a fractional number",
                    list: "a list", dict: "an object"}
PASTED_NAME = "pasted config"


class ConfigError(ValueError):
    """A pasted config.json that cannot be planned. str(err) is plain text built by kvviz
    (field names and numbers only, never the pasted text), safe to show as it is."""


@dataclass(frozen=True)
class Plan:
    """Everything the planner page asks of the user, in capacity's units."""

    shape: capacity.KVShape  # the model (as configured; what-ifs derive from it)
    gpu_bytes: int  # GPU memory, bytes (GB = 1e9 B)
    bandwidth_bytes_per_s: float | None  # peak memory bandwidth; None/0: unknown
    weight_dtype: str = "bf16"  # dtype of the weights
    kv_dtype: str = "bf16"  # dtype of the cached K and V
    overhead_fraction: float = capacity.DEFAULT_OVERHEAD_FRACTION  # GPU memory kept back
    context_tokens: int = 2000  # context per request, T
    batch: int = 1  # requests decoded together

    @property
    def weight_bytes(self) -> int:
        """params × bytes per parameter; 0 when the parameter count is unknown."""
        return capacity.weight_bytes(self.shape.weight_params or 0, self.weight_dtype)

    @property
    def kv_budget_bytes(self) -> int:
        return capacity.kv_budget_bytes(self.gpu_bytes, self.weight_bytes, self.overhead_fraction)

    @property
    def overhead_bytes(self) -> int:
        return capacity.runtime_overhead_bytes(self.gpu_bytes, self.overhead_fraction)

    def row(self, context_tokens: int | None = None, shape: capacity.KVShape | None = None,
            kv_dtype: str | None = None) -> dict:
        """capacity.capacity_row for this plan, at another context / shape / KV dtype if given."""
        return capacity.capacity_row(
            shape or self.shape, context_tokens or self.context_tokens, self.gpu_bytes,
            self.weight_bytes, kv_dtype or self.kv_dtype, self.overhead_fraction, None,
            self.bandwidth_bytes_per_s or None, self.batch)


# ---------------------------------------------------------------- pasted config.json


def shape_from_pasted_config(text: str, params: int | None = None) -> capacity.KVShape:
    """The KVShape of a pasted config.json; ConfigError with a plain message when it is unusable.

    `params` (the parameter count, which config.json does not carry) fills weight_params when
    the config has none. The name is always PASTED_NAME: pasted text is never echoed.
    """
    if not text.strip():
        raise ConfigError("The pasted config is empty: paste the contents of a config.json.")
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as err:  # err.msg is json's own wording, no pasted text
        raise ConfigError(f"The pasted config is not valid JSON: {err.msg} "
                          f"(line {err.lineno}, column {err.colno}).") from None
    if not isinstance(cfg, dict):
        raise ConfigError("The pasted config is not a JSON object ({...}).")
    _check_int_fields(cfg)
    if isinstance(cfg.get("text_config"), dict):
        _check_int_fields(cfg["text_config"])
    cfg = {k: v for k, v in cfg.items() if k not in ("name", "_name_or_path")}
    try:
        shape = capacity.kv_shape_from_config(cfg, name=PASTED_NAME)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"The pasted config cannot be used: {_plain(err)}.") from None
    if shape.weight_params is None and params:
        shape = replace(shape, weight_params=int(params))
    return shape


def _check_int_fields(cfg: dict) -> None:
    for key in _INT_FIELDS:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 1:
                raise ConfigError(f"In the pasted config, {key} must be a positive integer "
                                  f"(it is {value}).")
            continue
        kind = _JSON_TYPE_NAMES.get(type(value), "not a number")
        raise ConfigError(f"In the pasted config, {key} must be a positive integer (it is {kind}).")


def _plain(err: Exception) -> str:
    """capacity's message, reduced to letters, digits and light punctuation (no markup)."""
    text = str(err).split(", got ")[0]  # capacity quotes the offending value after ", got "
    return "".join(ch for ch in text if ch.isalnum() or ch in " _/.,-=<>()").strip()


# ---------------------------------------------------------------- headline figures


@dataclass(frozen=True)
class Metric:
    label: str
    value: str
    help: str


def fmt_seconds(s: float | None) -> str:
    """12 µs / 1.50 ms / 2.00 s: decode step floors span six orders of magnitude."""
    if s is None or math.isinf(s):
        return "–"
    if s < 1e-3:
        return f"{s * 1e6:,.0f} µs"
    return f"{s * 1e3:,.2f} ms" if s < 1 else f"{s:,.2f} s"


def fmt_rate(per_s: float | None) -> str:
    return "–" if per_s is None or math.isinf(per_s) else f"{per_s:,.0f} tok/s"


def headline_metrics(plan: Plan, fmt_bytes: Callable[[float], str]) -> list[Metric]:
    """The page's headline figures at context T, formatted (bytes with `fmt_bytes`)."""
    shape, row = plan.shape, plan.row()
    per_elem = capacity.kv_bytes_per_element(plan.kv_dtype)
    out = [
        Metric("KV per token", fmt_bytes(capacity.kv_bytes_per_token(shape, plan.kv_dtype)),
               f"2 (K and V) × {shape.num_layers} layers × {shape.num_kv_heads} KV heads × "
               f"{shape.head_dim} head_dim × {per_elem:g} B ({plan.kv_dtype})"),
        Metric(f"KV per request at {plan.context_tokens:,} tokens",
               fmt_bytes(row["kv_bytes_per_request"]),
               "Sliding-window layers hold at most their window." if shape.num_sliding_layers
               else "Every layer holds every token."),
        Metric(f"Requests that fit at {plan.context_tokens:,} tokens",
               f"{row['max_concurrent_requests']:,}",
               f"floor(KV budget {fmt_bytes(plan.kv_budget_bytes)} / KV per request); "
               "no prefix sharing between requests"),
    ]
    if "decode_step_floor_s" in row:
        out += _bandwidth_metrics(plan, row)
    return out


def _bandwidth_metrics(plan: Plan, row: dict) -> list[Metric]:
    step, batch = row["decode_step_floor_s"], plan.batch
    return [
        Metric(f"Decode step ≥ (batch {batch})", fmt_seconds(step),
               "Lower bound: (weights + the batch's cache) / peak bandwidth. Real steps are slower."),
        Metric("Tokens/s per request ≤", fmt_rate(row["tokens_per_s_per_request_ceiling"]),
               "Ceiling: one token per request per decode step, at the bandwidth floor."),
        Metric(f"Tokens/s, batch of {batch} ≤", fmt_rate(row["tokens_per_s_aggregate_ceiling"]),
               "Ceiling: batch / decode step floor."),
        Metric("Tokens/s, every request that fits ≤",
               fmt_rate(row["tokens_per_s_aggregate_ceiling_at_max"]),
               "Ceiling with all requests that fit decoding together: the weights are read once "
               "per step for all of them, every cache once."),
    ]


# ---------------------------------------------------------------- requests vs context


def curve_max_context(plan: Plan) -> int:
    """Right end of the curve: the model's max position (else DEFAULT_MAX_CONTEXT), or T if longer."""
    top = plan.shape.max_position or DEFAULT_MAX_CONTEXT
    return max(top, plan.context_tokens, 2 * CURVE_MIN_TOKENS)


def curve_contexts(max_tokens: int, min_tokens: int = CURVE_MIN_TOKENS,
                   per_octave: int = CURVE_POINTS_PER_OCTAVE) -> list[int]:
    """Log-spaced context lengths from min_tokens to max_tokens (both included), increasing."""
    points, k = [], 0
    while (t := round(min_tokens * 2 ** (k / per_octave))) < max_tokens:
        points.append(t)
        k += 1
    return sorted(set(points + [max_tokens]))


def fit_curve_frame(plan: Plan, max_tokens: int | None = None) -> pd.DataFrame:
    """Requests that fit at each context length: the "quadruple the context, quarter the users" curve.

    Columns: context_tokens, kv_bytes_per_request, max_concurrent_requests (one row per
    context, log-spaced from CURVE_MIN_TOKENS to max_tokens, default curve_max_context).
    """
    contexts = curve_contexts(max_tokens or curve_max_context(plan))
    rows = capacity.capacity_table(plan.shape, contexts, plan.gpu_bytes, plan.weight_bytes,
                                   plan.kv_dtype, plan.overhead_fraction)
    cols = ["context_tokens", "kv_bytes_per_request", "max_concurrent_requests"]
    return pd.DataFrame([{c: r[c] for c in cols} for r in rows], columns=cols)


def context_table_frame(plan: Plan, contexts: Sequence[int] = TABLE_CONTEXTS) -> pd.DataFrame:
    """capacity.capacity_table at fixed contexts, one row each.

    Columns: context_tokens, kv_bytes_per_request, max_concurrent_requests, and with a
    bandwidth also decode_step_floor_ms (capacity's decode_step_floor_s in ms, for the plan's
    batch), tokens_per_s_per_request_ceiling, tokens_per_s_aggregate_ceiling_at_max.
    """
    rows = [plan.row(t) for t in contexts]
    cols = ["context_tokens", "kv_bytes_per_request", "max_concurrent_requests"]
    timed = bool(rows) and "decode_step_floor_s" in rows[0]
    if timed:
        cols += ["decode_step_floor_ms", "tokens_per_s_per_request_ceiling",
                 "tokens_per_s_aggregate_ceiling_at_max"]
        rows = [{**r, "decode_step_floor_ms": r["decode_step_floor_s"] * 1e3} for r in rows]
    return pd.DataFrame([{c: r[c] for c in cols} for r in rows], columns=cols)


def context_sentence(table: pd.DataFrame) -> str:
    """'At 500 / 2,000 / 8,000 tokens: 1,234 / 308 / 77 requests fit.' from context_table_frame."""
    tokens = " / ".join(f"{t:,}" for t in table["context_tokens"])
    counts = " / ".join(f"{n:,}" for n in table["max_concurrent_requests"])
    return f"At {tokens} tokens: {counts} requests fit at once."


# ---------------------------------------------------------------- what-ifs


WHAT_IF_COLUMNS = ("group", "variant", "kv_heads", "kv_dtype", "kv_bytes_per_token",
                   "kv_bytes_per_request", "max_concurrent_requests", "current", "order")
GROUP_ATTENTION = "attention"
GROUP_DTYPE = "KV dtype"
GROUP_WINDOW = "sliding window"


def _window_label(shape: capacity.KVShape) -> str:
    if not shape.num_sliding_layers:
        return "no window"
    layers = ("all layers" if shape.num_sliding_layers == shape.num_layers
              else f"{shape.num_sliding_layers} of {shape.num_layers} layers")
    return f"window {shape.sliding_window:,} on {layers}"


def what_if_variants(plan: Plan, window: int | None) -> list[tuple[str, str, capacity.KVShape, str, bool]]:
    """(group, variant label, shape, kv_dtype, is the plan as configured) for each what-if."""
    shape, kind, dtype = plan.shape, plan.shape.attention_kind, plan.kv_dtype
    heads = shape.num_attention_heads
    out = [
        (GROUP_ATTENTION, f"MHA: {heads} KV heads", capacity.what_if_attention(shape, "mha"),
         dtype, False),
        (GROUP_ATTENTION, f"as configured ({kind}): {shape.num_kv_heads} KV heads", shape, dtype,
         True),
        (GROUP_ATTENTION, "MQA: 1 KV head", capacity.what_if_attention(shape, "mqa"), dtype, False),
    ]
    out += [(GROUP_DTYPE, f"KV {d}" + (" (as set)" if d == dtype else ""), shape, d, d == dtype)
            for d in PLANNER_KV_DTYPES]
    windows = [capacity.what_if_window(shape, None)]
    if shape.num_sliding_layers:
        windows.append(shape)
    if window:
        windows.append(capacity.what_if_window(shape, window))
    seen = set()
    for w in windows:
        label = _window_label(w) + (" (as configured)" if w == shape else "")
        if _window_label(w) not in seen:
            seen.add(_window_label(w))
            out.append((GROUP_WINDOW, label, w, dtype, _window_label(w) == _window_label(shape)))
    return out


def what_if_frame(plan: Plan, window: int | None = None) -> pd.DataFrame:
    """The same model as MHA / as configured / MQA, in each KV dtype, and with/without a window.

    One row per variant, all at the plan's context T, GPU and weights. Columns: group
    ("attention" / "KV dtype" / "sliding window"), variant (a unique label), kv_heads,
    kv_dtype, kv_bytes_per_token (the window does not change it: it caps tokens, not bytes per
    token), kv_bytes_per_request (at T), max_concurrent_requests (at T), current (True for the
    plan as configured), order (display order).
    """
    rows = []
    for order, (group, label, shape, dtype, current) in enumerate(what_if_variants(plan, window)):
        row = plan.row(shape=shape, kv_dtype=dtype)
        rows.append({"group": group, "variant": label, "kv_heads": shape.num_kv_heads,
                     "kv_dtype": dtype,
                     "kv_bytes_per_token": capacity.kv_bytes_per_token(shape, dtype),
                     "kv_bytes_per_request": row["kv_bytes_per_request"],
                     "max_concurrent_requests": row["max_concurrent_requests"],
                     "current": current, "order": order})
    return pd.DataFrame(rows, columns=list(WHAT_IF_COLUMNS))


# ---------------------------------------------------------------- where the time goes


def launch_bound(plan: Plan) -> dict | None:
    """Bandwidth floor vs a rough kernel-launch estimate for one decode step at T, batch B.

    Keys: decode_step_floor_s (capacity's lower bound), num_kernels (layers ×
    KERNELS_PER_LAYER), launch_s (num_kernels × LAUNCH_S, an estimate from assumptions), and
    bound: "kernel launches" when launching takes over BOUND_MARGIN × longer than reading the
    bytes, "memory bandwidth" when reading does, else "both" (too close to call, given that
    the launch figure is a rough estimate). None without a bandwidth.
    """
    row = plan.row()
    if "decode_step_floor_s" not in row:
        return None
    num_kernels = plan.shape.num_layers * KERNELS_PER_LAYER
    launch_s = num_kernels * LAUNCH_S
    floor_s = row["decode_step_floor_s"]
    bound = ("kernel launches" if launch_s > BOUND_MARGIN * floor_s else
             "memory bandwidth" if floor_s > BOUND_MARGIN * launch_s else "both")
    return {"decode_step_floor_s": floor_s, "num_kernels": num_kernels, "launch_s": launch_s,
            "bound": bound}
