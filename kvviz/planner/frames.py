"""Pure reshapers for the Capacity planner page: kvviz.planner.capacity results in, DataFrames out.

All arithmetic is kvviz.planner.capacity's, kvviz.planner.serving_plan's and kvviz.planner.parallel's, gathered by
kvviz.planner.deployment into typed results (kvviz.planner.results), and every sentence shared with
`kvviz plan` is kvviz.planner.words'; this module only picks the inputs (contexts, what-if variants), calls them,
and lays the answers out as frames whose column names are theirs (`context_tokens`,
`kv_bytes_per_request`, `max_concurrent_requests`, …), so the same names run on into the chart
encodings (kvviz/planner/charts.py). `TABLE_COLUMNS` says how panels.people_table shows them
(thousands separators, units); the raw frames are what the CSV downloads hold.

Standard library, pandas and kvviz only: no streamlit, no torch.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import pandas as pd

from kvviz.planner import capacity, deployment, results, words
from kvviz.planner import configs
from kvviz.core import safe_input
from kvviz.core import units
from kvviz.planner.capacity import ModelKV
from kvviz.core.errors import UserError

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

# Integer-valued config fields checked here first so that an error message never has to
# quote (untrusted) pasted text back.
_INT_FIELDS = (
    "num_hidden_layers", "n_layer", "num_layers", "num_attention_heads", "n_head",
    "num_key_value_heads", "num_kv_heads", "head_dim", "hidden_size", "n_embd", "d_model",
    "sliding_window", "max_window_layers", "sliding_window_pattern", "intermediate_size",
    "max_position_embeddings", "n_positions", "n_ctx", "vocab_size", "kv_lora_rank",
)
_JSON_TYPE_NAMES = {str: "a string", bool: "true/false", float: "a fractional number",
                    list: "a list", dict: "an object"}
PASTED_NAME = "pasted config"
fmt_seconds = words.fmt_seconds  # the page's formatter, worded once with the planner's sentences
PARAMS_REMEDY = "Enter it above to include them."  # the page's field for a parameter count


class ConfigError(UserError):
    """A pasted config.json that cannot be planned. str(err) is plain text built by kvviz
    (field names and numbers only, never the pasted text), safe to show as it is."""


@dataclass(frozen=True)
class Plan:
    """The model and the serving setup the page was asked about."""

    model: ModelKV  # as configured; what-ifs derive from it
    setup: deployment.Setup  # GPU, parallelism, dtypes, context, vLLM settings, what-ifs

    @cached_property
    def result(self) -> results.SetupPlan:
        """deployment.plan_setup: weights, per-GPU budget, plain and vLLM figures, what-ifs."""
        return deployment.plan_setup(self.model, self.setup)

    @property
    def context_tokens(self) -> int:
        return self.setup.context_tokens

    @property
    def weight_bytes(self) -> int:
        return self.result.per_gpu.weight_bytes

    @property
    def kv_budget_bytes(self) -> int:
        return self.result.per_gpu.kv_budget_bytes

    @property
    def overhead_bytes(self) -> int:
        return self.result.per_gpu.overhead_bytes

    def with_model(self, model: ModelKV, kv_dtype: str | None = None) -> "Plan":
        return Plan(model, replace(self.setup, kv_dtype=kv_dtype or self.setup.kv_dtype))


# ---------------------------------------------------------------- pasted config.json


def model_from_pasted_config(text: str, params: int | None = None) -> ModelKV:
    """The ModelKV of a pasted config.json; ConfigError with a plain message when it is unusable.

    `params` (a parameter count the user typed) replaces the meta-device count; it is needed only
    when transformers does not know the architecture. The name is always PASTED_NAME: pasted
    text is never echoed.
    """
    if not text.strip():
        raise ConfigError("The pasted config is empty: paste the contents of a config.json.")
    try:  # bounded: size, nesting and number length (kvviz.core.safe_input); no pasted text echoed
        cfg = safe_input.loads(text, "the pasted config")
    except UserError as err:
        raise ConfigError(str(err)) from None
    if not isinstance(cfg, dict):
        raise ConfigError("The pasted config is not a JSON object ({...}).")
    _check_int_fields(cfg)
    if isinstance(cfg.get("text_config"), dict):
        _check_int_fields(cfg["text_config"])
    cfg = {k: v for k, v in cfg.items() if k not in ("name", "_name_or_path")}
    _check_built_layers(cfg)
    try:
        return configs.model_from_config(cfg, PASTED_NAME, given_params=params or None, measured=True)
    except Exception as err:  # noqa: BLE001 - transformers raises many kinds; all become one line
        raise ConfigError(f"The pasted config cannot be used: {_plain(err, cfg)}.") from None


_LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers")
MAX_PASTED_LAYERS = 512  # the largest published models have ~130


def _check_built_layers(cfg: dict) -> None:
    """The layer cap on what the architecture will build, whatever the field is called (MPT and
    DBRX `n_layers`, Blenderbot `decoder_layers`, …): checked before anything is built."""
    try:
        counts = configs.built_layer_counts(cfg)
    except Exception as err:  # noqa: BLE001 - a config class refusing the fields: one plain line
        raise ConfigError(f"The pasted config cannot be used: {_plain(err, cfg)}.") from None
    for key, value in counts.items():
        if value > MAX_PASTED_LAYERS:
            field = key.split(".")[-1]
            raise ConfigError(f"In the pasted config, the architecture would build {value:,} layers "
                              f"({field}); kvviz plans models of at most {MAX_PASTED_LAYERS:,} layers.")


def _check_int_fields(cfg: dict) -> None:
    for key in _INT_FIELDS:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 1:
                raise ConfigError(f"In the pasted config, {key} must be a positive integer "
                                  f"(it is {value}).")
            if key in _LAYER_FIELDS and value > MAX_PASTED_LAYERS:  # each layer is built: 10^15 hangs
                raise ConfigError(f"In the pasted config, {key} is {value:,}; kvviz plans models of "
                                  f"at most {MAX_PASTED_LAYERS:,} layers.")
            continue
        kind = _JSON_TYPE_NAMES.get(type(value), "not a number")
        raise ConfigError(f"In the pasted config, {key} must be a positive integer (it is {kind}).")


def _plain(err: Exception, cfg: dict) -> str:
    """Why transformers refused the config, in kvviz's words: the config fields the error names
    (the pasted config's own keys, or kvviz's `_INT_FIELDS`; names only), else that it refused
    it. transformers' text itself is never shown: it quotes the values pasted ("… with value
    1e308 …")."""
    words = set("".join(ch if ch.isalnum() or ch == "_" else " " for ch in str(err)).split())
    keys = [*cfg, *(k for v in cfg.values() if isinstance(v, dict) for k in v), *_INT_FIELDS]
    named = sorted({k for k in keys if isinstance(k, str) and k.isidentifier() and len(k) <= 64 and k in words})[:3]
    if named:
        return f"transformers refused its {', '.join(named)} (check them against the model's own config.json)"
    return "transformers could not build a config from it (check its fields against the model's own config.json)"


# ---------------------------------------------------------------- headline figures


@dataclass(frozen=True)
class Metric:
    label: str
    value: str
    help: str  # the number in plain words, shown beside it


def fmt_rate(per_s: float | None) -> str:
    return "–" if per_s is None or math.isinf(per_s) else f"{per_s:,.0f} tok/s"


def fmt_count(n: float | None) -> str:
    return "–" if n is None else f"{n:,.0f}"


def memory_metrics(plan: Plan, fmt_bytes: Callable[[float], str]) -> list[Metric]:
    """KV per token, KV per request, requests that fit (per replica and in all), weights per GPU."""
    r, model, t = plan.result, plan.model, plan.context_tokens
    per_gpu, plain = r.per_gpu, r.plain
    kinds = capacity.layer_kind_bytes_per_token(model, plan.setup.kv_dtype)
    split = f" (one GPU's share under TP {r.tp})" if r.tp > 1 else ""
    out = [
        Metric("KV per token", fmt_bytes(capacity.kv_bytes_per_token(model, plan.setup.kv_dtype)),
               "Each token a request holds adds this much cache, summed over the layers: "
               + ", ".join(f"{k} layers {fmt_bytes(b)}" for k, b in kinds.items())
               + (f"; each GPU holds {fmt_bytes(per_gpu.kv_bytes_per_token)} of it."
                  if r.gpus > r.dp else ".")),
        Metric(f"KV per request at {t:,} tokens", fmt_bytes(plain.kv_bytes_per_request_per_gpu),
               f"One request of {t:,} tokens on one GPU{split}: windowed layers keep only their "
               "window, recurrent layers a fixed state."),
        Metric(f"Requests that fit at {t:,} tokens", fmt_count(plain.requests_per_replica),
               f"Per replica: KV budget {units.fmt_bytes_si(per_gpu.kv_budget_bytes)} per GPU ÷ KV per "
               "request, rounded down; no prefix sharing."),
    ]
    if not r.weights.params_known:  # no fit without the weights: the budget would count them as 0 B
        out[-1] = Metric(f"Requests that fit at {t:,} tokens", "–", words.params_unknown_sentence(PARAMS_REMEDY))
        return out
    if r.gpus > 1:
        out.append(Metric(f"Whole deployment ({r.label})", fmt_count(plain.requests_total),
                          f"{r.dp} replica(s) × {plain.requests_per_replica:,} requests."))
    out.append(Metric("Weights per GPU", units.fmt_bytes_si(per_gpu.weight_bytes), _weights_help(plan)))
    return out


def _weights_help(plan: Plan) -> str:
    w, r = plan.result.weights, plan.result
    if not w.params_known:
        return words.params_unknown_sentence(PARAMS_REMEDY)
    return words.weights_sentence(w) + f" Split over the {r.tp * r.pp} GPU(s) of a replica."


def vllm_metrics(plan: Plan) -> list[Metric]:
    """vLLM's blocks, tokens, concurrency at max_model_len and requests of T in whole blocks."""
    v, t = plan.result.vllm, plan.context_tokens
    if v.error or not plan.result.weights.params_known:
        return []
    return [
        Metric("KV blocks per GPU", fmt_count(v.num_blocks),
               f"Memory for KV ÷ page size ÷ layers per group, on {v.platform} (block size {v.block_size}, "
               f"{v.num_groups} group(s) of {v.group_size} layers, {v.layout})."),
        Metric("Tokens that fit (vLLM)", fmt_count(v.num_tokens),
               "What vLLM logs as \"KV cache size\": max concurrency × max_model_len."),
        Metric(f"Max concurrency at {v.max_model_len:,} tokens", f"{v.max_concurrency:,.3f}×",
               "Blocks ÷ blocks one request of max_model_len needs, as vLLM logs it."),
        Metric(f"Requests of {t:,} tokens (whole blocks)",
               fmt_count(v.requests_at_context_per_replica),
               "Per replica, each request rounded up to whole blocks in every layer group"
               + (" (and the in-flight reservation the note below explains)." if in_flight_note(plan) else ".")),
    ]


def in_flight_note(plan: Plan) -> str | None:
    """words.in_flight_sentence for this plan (sliding / chunked layers' in-flight reservation)."""
    windowed = any(s.kind in (capacity.SLIDING, capacity.CHUNKED) for s in plan.model.specs)
    return words.in_flight_sentence(plan.result.vllm, plan.result.plain.requests_per_replica, windowed)


def speed_metrics(plan: Plan) -> list[Metric]:
    """The decode-step floor and token-rate ceilings, when the GPU's bandwidth is known."""
    b = plan.result.bandwidth
    if not b or not plan.result.start.starts:  # no decode speed for a deployment that cannot start
        return []
    batch = plan.setup.batch
    return [
        Metric(f"Decode step ≥ (batch {batch})", fmt_seconds(b.decode_step_floor_s),
               "Lower bound: (active weights + the batch's cache) ÷ peak bandwidth, stage after "
               "stage. Real steps are slower."),
        Metric("Tokens/s per request ≤", fmt_rate(b.tokens_per_s_per_request_ceiling),
               "Ceiling: one token per request per decode step, at the bandwidth floor."),
        Metric(f"Tokens/s, batch of {batch} ≤", fmt_rate(b.tokens_per_s_aggregate_ceiling),
               "Ceiling: batch ÷ decode step floor."),
        Metric("Tokens/s, every request that fits ≤",
               fmt_rate(b.tokens_per_s_aggregate_ceiling_at_max),
               "Ceiling with all requests that fit decoding together: the weights are read once "
               "per step for all of them, every cache once."),
    ]


def headline_metrics(plan: Plan, fmt_bytes: Callable[[float], str]) -> list[Metric]:
    """Every headline figure: memory, then vLLM's, then speed bounds."""
    return memory_metrics(plan, fmt_bytes) + vllm_metrics(plan) + speed_metrics(plan)


# ---------------------------------------------------------------- requests vs context


def curve_max_context(plan: Plan) -> int:
    """Right end of the curve: the model's max position (else DEFAULT_MAX_CONTEXT), or T if longer."""
    top = plan.model.max_position or DEFAULT_MAX_CONTEXT
    return max(top, plan.context_tokens, 2 * CURVE_MIN_TOKENS)


def curve_contexts(max_tokens: int, min_tokens: int = CURVE_MIN_TOKENS,
                   per_octave: int = CURVE_POINTS_PER_OCTAVE) -> list[int]:
    """Log-spaced context lengths from min_tokens to max_tokens (both included), increasing."""
    points, k = [], 0
    while (t := round(min_tokens * 2 ** (k / per_octave))) < max_tokens:
        points.append(t)
        k += 1
    return sorted(set(points + [max_tokens]))


def _rows(plan: Plan, contexts: Sequence[int]) -> list[dict]:
    setup = replace(plan.setup, prefix_tokens=0, offload_bytes=0)
    return [results.row_json(r) for r in deployment.context_rows(plan.model, setup, contexts)]


def fit_curve_frame(plan: Plan, max_tokens: int | None = None) -> pd.DataFrame:
    """Requests that fit at each context length: the "quadruple the context, quarter the users" curve.

    Columns: context_tokens, kv_bytes_per_request (per GPU), max_concurrent_requests (per
    replica), vllm_requests_per_replica (whole blocks; None when vLLM cannot serve the dtype).
    """
    rows = _rows(plan, sorted({*curve_contexts(max_tokens or curve_max_context(plan)), plan.context_tokens}))
    cols = ["context_tokens", "kv_bytes_per_request", "max_concurrent_requests",
            "vllm_requests_per_replica"]
    return pd.DataFrame([{c: r[c] for c in cols} for r in rows], columns=cols)


def context_table_frame(plan: Plan, contexts: Sequence[int] = TABLE_CONTEXTS) -> pd.DataFrame:
    """One row per context (the chosen context T among them): context_tokens, kv_bytes_per_request (per GPU),
    max_concurrent_requests (per replica), vllm_requests_per_replica, requests_total, and with a
    bandwidth decode_step_floor_ms, tokens_per_s_per_request_ceiling,
    tokens_per_s_aggregate_ceiling_at_max."""
    rows = _rows(plan, sorted({*contexts, plan.context_tokens}))
    cols = ["context_tokens", "kv_bytes_per_request", "max_concurrent_requests",
            "vllm_requests_per_replica", "requests_total"]
    if rows and "decode_step_floor_s" in rows[0] and plan.result.start.starts:  # none for what cannot start
        cols += ["decode_step_floor_ms", "tokens_per_s_per_request_ceiling",
                 "tokens_per_s_aggregate_ceiling_at_max"]
        rows = [{**r, "decode_step_floor_ms": r["decode_step_floor_s"] * 1e3} for r in rows]
    return pd.DataFrame([{c: r[c] for c in cols} for r in rows], columns=cols)


def context_sentence(table: pd.DataFrame) -> str:
    """'At 500 / 2,000 / 8,000 tokens: 1,234 / 308 / 77 requests fit.' from context_table_frame."""
    tokens = " / ".join(f"{t:,}" for t in table["context_tokens"])
    counts = " / ".join(f"{n:,}" for n in table["max_concurrent_requests"])
    return f"At {tokens} tokens: {counts} requests fit at once."


# ---------------------------------------------------------------- layers and vLLM's view


def layer_kinds_frame(plan: Plan) -> pd.DataFrame:
    """One row per layer kind (as labelled by kvviz.core.layout): layer_kind, layers,
    kv_bytes_per_token (those layers together), kv_bytes_per_request (at T, one GPU of TP 1)."""
    model, dtype, t = plan.model, plan.setup.kv_dtype, plan.context_tokens
    groups: dict[str, list] = {}
    for spec in model.specs:
        groups.setdefault(spec.label(), []).append(spec)
    rows = []
    for label, specs in groups.items():
        part = replace(model, specs=tuple(specs))
        rows.append({"layer_kind": label, "layers": len(specs),
                     "kv_bytes_per_token": capacity.kv_bytes_per_token(part, dtype),
                     "kv_bytes_per_request": capacity.kv_bytes_for_context(part, t, dtype)})
    return pd.DataFrame(rows, columns=["layer_kind", "layers", "kv_bytes_per_token",
                                       "kv_bytes_per_request"])


def vllm_frame(plan: Plan) -> pd.DataFrame:
    """vLLM's settings and figures as rows of (figure, value, meaning); empty when it cannot serve."""
    v = plan.result.vllm
    if v.error:
        return pd.DataFrame(columns=["figure", "value", "meaning"])
    rows = [
        ("gpu_memory_utilization", f"{v.gpu_memory_utilization:g}", "1 − the overhead fraction"),
        ("block_size", f"{v.block_size:,}", "tokens per block (after vLLM's own adjustments)"),
        ("max_model_len", f"{v.max_model_len:,}", "longest request admitted"),
        ("page size", units.fmt_bytes(v.page_bytes), "one block of one layer"),
        ("KV cache groups", f"{v.num_groups:,} × {v.group_size:,} layers", v.layout),
        ("num_gpu_blocks", f"{v.num_blocks:,}", "blocks per GPU"),
        ("KV cache size", f"{v.num_tokens:,} tokens", "max concurrency × max_model_len"),
        ("blocks per request", f"{v.blocks_per_request:,}", "at max_model_len, all groups"),
        ("maximum concurrency", f"{v.max_concurrency:,.3f}×", "at max_model_len"),
    ]
    return pd.DataFrame(rows, columns=["figure", "value", "meaning"])


# ---------------------------------------------------------------- what-ifs


WHAT_IF_COLUMNS = ("group", "variant", "kv_heads", "kv_dtype", "kv_bytes_per_token",
                   "kv_bytes_per_request", "max_concurrent_requests", "current", "order")
GROUP_ATTENTION = "attention"
GROUP_DTYPE = "KV dtype"
GROUP_WINDOW = "sliding window"


def _window_label(model: ModelKV) -> str:
    windowed = model.windowed_layers
    if not windowed:
        return "no window"
    caps = sorted({s.token_cap for s in model.specs if s.token_cap})
    layers = "all layers" if windowed == model.num_layers else f"{windowed} of {model.num_layers} layers"
    return f"window {', '.join(f'{c:,}' for c in caps)} on {layers}"


def what_if_variants(plan: Plan, window: int | None) -> list[tuple[str, str, ModelKV, str, bool]]:
    """(group, variant label, model, kv_dtype, is the plan as configured) for each what-if."""
    model, dtype = plan.model, plan.setup.kv_dtype
    kind, heads = model.attention_kind, model.num_attention_heads
    out = [(GROUP_ATTENTION, f"as configured ({kind}): {model.kv_heads} KV heads", model, dtype, True)]
    if kind not in ("MLA", "no attention"):
        out.insert(0, (GROUP_ATTENTION, f"MHA: {heads} KV heads",
                       capacity.what_if_attention(model, "mha"), dtype, False))
        out.append((GROUP_ATTENTION, "MQA: 1 KV head", capacity.what_if_attention(model, "mqa"),
                    dtype, False))
    out += [(GROUP_DTYPE, f"KV {d}" + (" (as set)" if d == dtype else ""), model, d, d == dtype)
            for d in PLANNER_KV_DTYPES]
    windows = [capacity.what_if_window(model, None)]
    if model.windowed_layers:
        windows.append(model)
    if window:
        windows.append(capacity.what_if_window(model, window))
    seen = set()
    for w in windows:
        label = _window_label(w)
        if label not in seen:
            seen.add(label)
            current = label == _window_label(model)
            out.append((GROUP_WINDOW, label + (" (as configured)" if current else ""), w, dtype,
                        current))
    return out


def what_if_frame(plan: Plan, window: int | None = None) -> pd.DataFrame:
    """The same model as MHA / as configured / MQA, in each KV dtype, and with/without a window.

    One row per variant, all at the plan's context T and setup. Columns: group ("attention" /
    "KV dtype" / "sliding window"), variant (a unique label), kv_heads, kv_dtype,
    kv_bytes_per_token (a window does not change it: it caps tokens, not bytes per token),
    kv_bytes_per_request (at T, per GPU), max_concurrent_requests (at T, per replica), current
    (True for the plan as configured), order (display order).
    """
    rows = []
    for order, (group, label, model, dtype, current) in enumerate(what_if_variants(plan, window)):
        try:
            plain = plan.with_model(model, dtype).result.plain
        except UserError:  # e.g. MHA's heads do not split over this TP size
            continue
        rows.append({"group": group, "variant": label, "kv_heads": model.kv_heads,
                     "kv_dtype": dtype, "kv_bytes_per_token": capacity.kv_bytes_per_token(model, dtype),
                     "kv_bytes_per_request": plain.kv_bytes_per_request_per_gpu,
                     "max_concurrent_requests": plain.requests_per_replica,
                     "current": current, "order": order})
    return pd.DataFrame(rows, columns=list(WHAT_IF_COLUMNS))


# ---------------------------------------------------------------- tables for people


# column -> (label, kind) for panels.people_table: counts with thousands separators, bytes in
# KiB / MiB / GiB, ms with a decimal. The frames keep raw numbers: the CSV downloads hold those.
TABLE_COLUMNS = {
    "context_tokens": ("context (tokens)", "count"),
    "kv_bytes_per_request": ("KV / request / GPU", "bytes"),
    "max_concurrent_requests": ("fit / replica", "count"),
    "vllm_requests_per_replica": ("as vLLM (whole blocks)", "count"),
    "requests_total": ("in all", "count"),
    "decode_step_floor_ms": ("step ≥", "ms2"),  # two decimals, as `kvviz plan` prints it
    "tokens_per_s_per_request_ceiling": ("tok/s/req ≤", "count"),
    "tokens_per_s_aggregate_ceiling_at_max": ("tok/s all ≤", "count"),
    "group": ("what-if", "text"), "variant": ("variant", "text"), "kv_heads": ("KV heads", "count"),
    "kv_dtype": ("KV dtype", "text"), "kv_bytes_per_token": ("KV per token", "bytes"),
    "current": ("as configured", "flag"),
}


# ---------------------------------------------------------------- where the time goes


def launch_bound(plan: Plan) -> dict | None:
    """Bandwidth floor vs a rough kernel-launch estimate for one decode step at T, batch B.

    Keys: decode_step_floor_s (the lower bound), num_kernels (layers × KERNELS_PER_LAYER),
    launch_s (num_kernels × LAUNCH_S, an estimate from assumptions), and bound: "kernel
    launches" when launching takes over BOUND_MARGIN × longer than reading the bytes, "memory
    bandwidth" when reading does, else "both" (too close to call). None without a bandwidth.
    """
    b = plan.result.bandwidth
    if not b:
        return None
    num_kernels = plan.model.num_layers * KERNELS_PER_LAYER
    launch_s = num_kernels * LAUNCH_S
    floor_s = b.decode_step_floor_s
    bound = ("kernel launches" if launch_s > BOUND_MARGIN * floor_s else
             "memory bandwidth" if floor_s > BOUND_MARGIN * launch_s else "both")
    return {"decode_step_floor_s": floor_s, "num_kernels": num_kernels, "launch_s": launch_s,
            "bound": bound}
