"""The only place that knows which cache each decoder layer keeps (transformers 5.24).

A transformers config becomes one `kvviz.core.spec.CacheSpec` per decoder layer (the class of its
kind: FullSpec, SlidingSpec, ChunkedSpec, LatentSpec, StateSpec, SharedSpec). The layer kinds come from
transformers' own resolution (`cache_utils.get_layer_types_and_kwargs`, the function
`DynamicCache(config=...)` uses to pick each layer's class, applied after the config class has
filled in its defaults, e.g. Gemma 3's 5:1 and Cohere2's 3:1 local:global patterns), so kvviz
never keeps a second set of rules. What this module adds is the size of each kind (the arithmetic
on a spec, tokens held and bytes, is the spec classes' own):

| kind      | vLLM spec                    | transformers layer class       | per token per sequence  |
|-----------|------------------------------|--------------------------------|-------------------------|
| full      | FullAttentionSpec            | DynamicLayer                   | 2 × kv_heads × head_dim |
| sliding W | SlidingWindowSpec            | DynamicSlidingWindowLayer      | same, capped at W − 1   |
| chunked C | ChunkedLocalAttentionSpec    | DynamicSlidingWindowLayer      | same, capped at C − 1   |
| latent    | MLAAttentionSpec             | DynamicLayer (one "head")      | kv_lora_rank + rope dim |
| state     | MambaSpec                    | LinearAttentionLayer (hybrid: LinearAttentionAnd…Layer) | 0 (fixed state values) |
| shared ←j | (KV sharing)                 | DummyLayer                     | 0 (reuses layer j)      |

An "indexed_attention" layer (DeepSeek-V3.2's sparse attention, DynamicIndexedLayer) is a full or
latent layer whose tokens also keep `index_head_dim` indexer-key values (`index_values`); so is a
MiniMax-M3 "minimax_m3_sparse" layer (its MiniMaxM3VLSparseCacheLayer keeps one [batch, 1, tokens,
index_head_dim] `idx_keys` tensor beside K and V).

Values are elements; multiply by the element size of the cache (the model's dtype). Some
recurrent states are kept in float32 whatever the model dtype (`state_float32_values`: the SSM
states of the Mamba families, Qwen3-Next's delta-rule state; measured in bf16). DeepSeek-V4's
compressed layers are sliding layers with a compressor (CompressedSpec: entries every
`compress_rate` tokens, buffered tokens, overlap halves); xLSTM and RWKV, which keep their whole
state in objects of their own, are one StateSpec per layer (_OWN_STATES). A layer kind transformers
has but kvviz does not size raises UserError naming it; a state family without a size rule here
gets `state_known=False`.
No torch import here: only transformers' config classes and its layer-type resolution, and those
only inside the two functions that read a config, so the arithmetic on specs (the planner, views,
captions) imports this module without loading transformers.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from kvviz.core.spec import (CHUNKED, FULL, KINDS, LATENT, SHARED, SLIDING, STATE, CacheSpec, ChunkedSpec,  # noqa: F401 - re-exported
                              CompressedSpec, FullSpec, LatentSpec, SharedSpec, SlidingSpec, StateSpec, bytes_per_token,
                              formula_bytes, kinds_summary, state_bytes, unknown_states)
from kvviz.core.errors import UserError



# --- building configs ----------------------------------------------------------------------------

class UnknownModelType(UserError):
    """A config without a model_type, or one transformers has no class for (the planner then reads
    its generic fields)."""


def config_from_dict(d: dict):
    """A transformers config from published config.json values (`model_type` picks the class).

    Raises UserError with a message naming the problem for an unknown model type or a field the
    config class refuses.
    """
    if not isinstance(d, dict):
        raise UserError(f"a model config must be a JSON object, got {type(d).__name__}")
    fields = dict(d)
    model_type = fields.pop("model_type", None)
    if not isinstance(model_type, str) or not model_type:
        raise UnknownModelType("the config has no 'model_type' (e.g. \"llama\"): kvviz cannot tell the architecture")
    fields.pop("auto_map", None)  # remote code is never run
    from transformers import AutoConfig
    try:
        return AutoConfig.for_model(model_type, **fields)
    except Exception as exc:  # noqa: BLE001 - config classes raise many types; all mean "bad input"
        if "Unrecognized model identifier" in str(exc):
            raise UnknownModelType(f"unknown model_type {model_type!r}: transformers has no such architecture") from None
        raise UserError(f"{model_type} config: {_config_problem(exc)}") from None


def _config_problem(exc: Exception) -> str:
    """The most specific line of a config error (strict-dataclass errors wrap the real cause)."""
    cause = exc.__cause__ or exc
    text = str(cause).strip()
    return text.splitlines()[-1].strip() if text else type(cause).__name__


# --- config → layer specs ------------------------------------------------------------------------

def layer_specs(config) -> tuple[CacheSpec, ...]:
    """One CacheSpec per decoder layer, from a transformers config (the text config of multimodal ones).

    UserError (naming the missing field) when the config lacks a field a size rule needs: then the
    layout is "not modelled".
    """
    try:
        return _layer_specs(config)
    except (AttributeError, KeyError, TypeError) as exc:
        model_type = getattr(config, "model_type", "this model")
        raise UserError(f"{model_type}: cache sizes not modelled ({type(exc).__name__}: {exc})") from None


def _layer_specs(config) -> tuple[CacheSpec, ...]:
    text = config.get_text_config(decoder=True)
    own = _OWN_STATES.get(text.model_type)
    if own is not None:  # a recurrent model with a state object of its own, no attention layers
        size = own(text)
        return tuple(StateSpec(state_values=size.plain, state_float32_values=size.float32, state_family=size.family)
                     for _ in range(text.num_hidden_layers))
    from transformers.cache_utils import get_layer_types_and_kwargs
    types, kwargs = get_layer_types_and_kwargs(text)  # what DynamicCache(config=...) builds from
    layer_configs = list(getattr(text, "per_layer_config", None) or [text] * len(types))
    shared = _shared_sources(text, types)
    return tuple(_spec(text, lc, t, kw, shared.get(i)) for i, (t, kw, lc)
                 in enumerate(zip(types, kwargs, layer_configs)))


def _spec(text, layer_config, layer_type: str, kwargs: dict, source: int | None) -> CacheSpec:
    if text.model_type == "deepseek_v4":
        return _deepseek_v4_spec(layer_config, layer_type)
    if layer_type == "dummy":
        return SharedSpec(shared_with=source)
    if layer_type in ("linear_attention", "conv"):
        return _state_spec(text, None)
    if layer_type in ("hybrid", "hybrid_sliding"):
        return _state_spec(text, _attention_spec(layer_config, "sliding_attention"
                                                 if layer_type == "hybrid_sliding" else "full_attention", kwargs))
    if layer_type in ("full_attention", "sliding_attention", "chunked_attention"):
        return _attention_spec(layer_config, layer_type, kwargs)
    if layer_type in ("indexed_attention", "minimax_m3_sparse"):  # DSA (DeepSeek-V3.2, GLM-5), MiniMax-M3's
        # sparse layers: K/V plus one indexer key of index_head_dim per token
        base, index = _attention_spec(layer_config, "full_attention", kwargs), layer_config.index_head_dim
        return replace(base, values_per_token=base.values_per_token + index, index_values=index)
    raise UserError(f"{text.model_type}: layer type {layer_type!r} is not modelled by kvviz")


def _attention_spec(c, layer_type: str, kwargs: dict) -> CacheSpec:
    cap = kwargs.get("sliding_window")
    kind = {"full_attention": FULL, "sliding_attention": SLIDING, "chunked_attention": CHUNKED}[layer_type]
    if kind == FULL:
        cap = None
    rank, rope = getattr(c, "kv_lora_rank", None), getattr(c, "qk_rope_head_dim", None)
    if rank and rope and kind == FULL:  # MLA: latent as "keys", rope key as "values", one head each
        return LatentSpec(kv_heads=1, values_per_token=rank + rope, latent_rope=rope)
    heads = c.num_attention_heads
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    return CacheSpec(kind=kind, kv_heads=kv_heads, values_per_token=2 * kv_heads * head_dim, token_cap=cap)


def _deepseek_v4_spec(c, layer_type: str) -> CacheSpec:
    """DeepSeek-V4 (modeling_deepseek_v4.py): every layer keeps a window of one K = V head (the last
    sliding_window − 1 tokens). A plain sliding layer is transformers' own sliding layer, which
    stores the one tensor twice (as keys and as values: 2 × head_dim per token); a compressed
    layer's own class keeps it once (`values` is `keys`: head_dim per token) and also runs a compressor per its `compress_rates` entry r: per closed window one entry of head_dim
    (HCA), or of head_dim + index_head_dim (CSA: the compressor's and its indexer's); per buffered
    token the kv and gate projections (HCA 2 × head_dim; CSA 2 × 2 × (head_dim + index_head_dim));
    CSA also keeps its last window's first half (kv and gate: 2 × r × (head_dim + index_head_dim))."""
    if layer_type == "sliding_attention":
        return SlidingSpec(kv_heads=1, values_per_token=2 * c.head_dim, token_cap=c.sliding_window)
    window = dict(kv_heads=1, values_per_token=c.head_dim, key_values_per_token=c.head_dim,
                  token_cap=c.sliding_window)
    rate = c.compress_rates[layer_type]
    if layer_type == "heavily_compressed_attention":
        return CompressedSpec(**window, compress_rate=rate, compressed_values=c.head_dim,
                              buffer_values=2 * c.head_dim)
    if layer_type == "compressed_sparse_attention":
        both = c.head_dim + c.index_head_dim
        return CompressedSpec(**window, compress_rate=rate, compressed_values=both, buffer_values=4 * both,
                              overlap_values=2 * rate * both)
    raise UserError(f"{c.model_type}: layer type {layer_type!r} is not modelled by kvviz")


def _shared_sources(text, types: list[str]) -> dict[int, int]:
    """Layer i → the layer whose KV it reuses, for transformers' KV-sharing configs (Gemma 3n)."""
    modes = getattr(text, "kv_sharing_modes", None)
    if not modes:
        return {}
    pattern = list(getattr(text, "layer_types", None) or [])
    first = next((i for i, m in enumerate(modes) if m == "reuse"), len(modes))
    sources = {}
    for i, mode in enumerate(modes):
        if mode == "reuse" and i < len(pattern):
            producers = [j for j in range(first) if pattern[j] == pattern[i]]
            sources[i] = producers[-1] if producers else None
    return sources


# --- recurrent state sizes -----------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class StateSize:
    """One layer's recurrent state: what transformers keeps, and the parts vLLM sizes its own way."""

    plain: int  # values in the model's dtype
    float32: int  # values transformers keeps in float32 whatever the dtype
    conv: int = 0  # of `plain`, a convolution window of `kernel` columns (vLLM keeps kernel − 1)
    kernel: int = 0
    family: str = ""  # vLLM's mixer: mamba1, mamba2, gated_delta, short_conv, linear_attention
    pinned: bool = False  # the config pins the float32 part's dtype (vLLM honours it; else model dtype)


def _state_spec(text, attention: CacheSpec | None) -> CacheSpec:
    rule = _STATE_SIZES.get(text.model_type)
    size = rule(text) if rule else StateSize(plain=0, float32=0)
    parts = dict(state_known=rule is not None, conv_values=size.conv, conv_kernel=size.kernel,
                 state_family=size.family, state_pinned=size.pinned)
    if attention is None:
        return StateSpec(state_values=size.plain, state_float32_values=size.float32, **parts)
    return replace(attention, state_values=size.plain, state_float32_values=size.float32, **parts)


def _mamba1(inner: int, d_conv: int, d_state: int) -> StateSize:
    """Mamba: conv (inner × d_conv) in the model's dtype + a float32 SSM state (inner × d_state)."""
    return StateSize(plain=inner * d_conv, float32=inner * d_state, conv=inner * d_conv, kernel=d_conv,
                     family="mamba1")


def _mamba2(inner: int, groups: int, d_state: int, d_conv: int, heads: int, d_head: int) -> StateSize:
    """Mamba-2: conv ((inner + 2 × groups × d_state) × d_conv) in the model's dtype + a float32
    SSM state (heads × d_head × d_state)."""
    conv = (inner + 2 * groups * d_state) * d_conv
    return StateSize(plain=conv, float32=heads * d_head * d_state, conv=conv, kernel=d_conv, family="mamba2")


def _jamba_state(c) -> StateSize:
    return _mamba1(c.mamba_expand * c.hidden_size, c.mamba_d_conv, c.mamba_d_state)


def _mamba_state(c) -> StateSize:  # mamba, falcon_mamba
    return _mamba1(c.intermediate_size, c.conv_kernel, c.state_size)


def _bamba_state(c) -> StateSize:  # bamba, granitemoehybrid
    return _mamba2(int(c.mamba_expand * c.hidden_size), c.mamba_n_groups, c.mamba_d_state, c.mamba_d_conv,
                   c.mamba_n_heads, c.mamba_d_head)


def _falcon_h1_state(c) -> StateSize:
    inner = c.mamba_d_ssm if c.mamba_d_ssm is not None else int(c.mamba_expand * c.hidden_size)
    return _mamba2(inner, c.mamba_n_groups, c.mamba_d_state, c.mamba_d_conv, c.mamba_n_heads, c.mamba_d_head)


def _mamba2_state(c) -> StateSize:
    return _mamba2(int(c.expand * c.hidden_size), c.n_groups, c.state_size, c.conv_kernel, c.num_heads,
                   c.head_dim)


def _nemotron_h_state(c) -> StateSize:
    """The SSM cache's dtype is the config's `mamba_ssm_cache_dtype` (float32 when absent)."""
    size = _mamba2(c.mamba_num_heads * c.mamba_head_dim, c.n_groups, c.ssm_state_size, c.conv_kernel,
                   c.mamba_num_heads, c.mamba_head_dim)
    if getattr(c, "mamba_ssm_cache_dtype", "float32") != "float32":
        return replace(size, plain=size.plain + size.float32, float32=0)  # an SSM cache in the model's dtype
    return replace(size, pinned=True)


def _gated_delta_state(c) -> StateSize:
    """Gated DeltaNet (Qwen3-Next, Qwen3.5, OLMo hybrid): conv over q, k, v (× kernel) + a float32
    state per value head (Qwen3.5's `mamba_ssm_dtype`, when given, pins it for vLLM)."""
    key_dim = c.linear_num_key_heads * c.linear_key_head_dim
    value_dim = c.linear_num_value_heads * c.linear_value_head_dim
    conv = (2 * key_dim + value_dim) * c.linear_conv_kernel_dim
    pinned = getattr(c, "mamba_ssm_dtype", None) == "float32"
    return StateSize(plain=conv, float32=c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim,
                     conv=conv, kernel=c.linear_conv_kernel_dim, family="gated_delta", pinned=pinned)


def _short_conv_state(c) -> StateSize:
    """LFM2's short convolution: hidden × conv_L_cache."""
    return StateSize(plain=c.hidden_size * c.conv_L_cache, float32=0, conv=c.hidden_size * c.conv_L_cache,
                     kernel=c.conv_L_cache,
                     family="short_conv")


def _lightning_state(c) -> StateSize:
    """MiniMax's lightning attention: one head_dim × head_dim state per head."""
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return StateSize(plain=c.num_attention_heads * head_dim * head_dim, float32=0, family="linear_attention")


def _xlstm_state(c) -> StateSize:
    """xLSTM's mLSTM state per block (its `xLSTMCache.rnn_state`): C (heads × qk × v), n (heads × qk)
    and m (heads), in the model's dtype; qk and v head sizes as the config rounds them."""
    heads, qk, v = c.num_heads, c.qk_head_dim, c.v_head_dim
    return StateSize(plain=heads * qk * v + heads * qk + heads, float32=0, family="mlstm")


def _rwkv_state(c) -> StateSize:
    """RWKV's `state=` list, per layer: two hidden-size shift states in the model's dtype and three
    hidden-size WKV states (numerator, denominator, max) in float32."""
    return StateSize(plain=2 * c.hidden_size, float32=3 * c.hidden_size, family="rwkv")


# Recurrent models whose whole state is an object of their own (kvviz.engine.own_cache).
_OWN_STATES = {"xlstm": _xlstm_state, "rwkv": _rwkv_state}


# Measured on tiny models in fp32 and bf16 (tests/engine/test_architectures.py): conv states follow the
# model's dtype; SSM and delta-rule states stay float32.
_STATE_SIZES = {"jamba": _jamba_state, "mamba": _mamba_state, "falcon_mamba": _mamba_state,
                "bamba": _bamba_state, "granitemoehybrid": _bamba_state, "falcon_h1": _falcon_h1_state,
                "mamba2": _mamba2_state, "nemotron_h": _nemotron_h_state, "qwen3_next": _gated_delta_state,
                "qwen3_5_text": _gated_delta_state, "qwen3_5_moe_text": _gated_delta_state,
                "olmo_hybrid": _gated_delta_state,
                "lfm2": _short_conv_state, "minimax": _lightning_state}


# --- arithmetic on specs (each rule lives on the spec classes, kvviz.core.spec) ---------------------

def layer_tokens_held(spec: CacheSpec, tokens: int) -> float:
    """Tokens transformers' dynamic cache holds for that layer after `tokens` positions
    (`CacheSpec.tokens_held`: a sliding or chunked layer keeps the last cap − 1). A layer with a
    compressor (DeepSeek-V4's CompressedSpec) counts in tokens of its window's size, values held ÷
    values per token, so that values per token × this (the planner's kv_bytes_for_context) counts
    its compressed entries, buffered tokens and overlap too (`CacheSpec.values_held`)."""
    extra = spec.compressor_values(tokens)
    return spec.tokens_held(tokens) + extra / spec.values_per_token if extra else spec.tokens_held(tokens)


def layer_formula_bytes(spec: CacheSpec, tokens: int, batch: int, elem_bytes: float) -> int:
    """One layer's cache after `tokens` positions (`CacheSpec.bytes_at`)."""
    return spec.bytes_at(tokens, elem_bytes, batch)
