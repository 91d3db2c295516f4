"""transformers' own quantized KV cache (`QuantizedCache`) and its bytes, measured from tensors.

A quantized layer keeps older tokens quantized (`_quantized_keys` / `_quantized_values`: the
packed payload plus scales and zero points) and the newest ones, up to `residual_length`, in
full precision (`.keys` / `.values`); when the residual fills, everything is re-quantized.
fp8 quantizes per tensor (one scale) and has no residual.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from kvviz.core.errors import UserError

# backend -> the bit widths whose packing kvviz counts (hqq's 1/3-bit packings are not offered)
BACKENDS = {"quanto": (2, 4), "hqq": (2, 4, 8), "fp8": (8,)}
Q_GROUP_SIZE = 64  # transformers' default; a group must divide every layer's numel, so at most head_dim


def group_size(head_dim: int) -> int:
    """Values per scale: transformers' 64, or a divisor of a smaller head_dim (a tiny model's 16)."""
    return math.gcd(Q_GROUP_SIZE, head_dim)


def head_dim_of(config) -> int:
    text = config.get_text_config(decoder=True)
    return getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads


def available() -> tuple[dict[str, tuple], dict[str, str]]:
    """({backend: nbits offered} that run here, {backend: why not})."""
    from transformers.utils import is_hqq_available, is_optimum_quanto_available
    ok, refused = {"fp8": BACKENDS["fp8"]}, {}
    for name, present in (("quanto", is_optimum_quanto_available()), ("hqq", is_hqq_available())):
        if present:
            ok[name] = BACKENDS[name]
        else:
            refused[name] = f"the {name} package is not installed"
    return ok, refused


def check(backend: str, nbits: int, residual_length: int) -> None:
    """UserError in plain words for a backend, bit width or residual kvviz does not offer (fp8
    has one width and no residual: those two are not asked)."""
    if backend not in BACKENDS:
        raise UserError(f"unknown quantization backend {backend!r}: pick one of {', '.join(BACKENDS)}")
    if backend == "fp8":
        return
    if nbits not in BACKENDS[backend]:
        raise UserError(f"{backend} offers {', '.join(map(str, BACKENDS[backend]))} bits, not {nbits}")
    if residual_length < 1:
        raise UserError("the residual length must be at least 1 token")


def make_cache(config, backend: str, nbits: int = 4, residual_length: int = 16):
    """A QuantizedCache; UserError in plain words for a backend / bit width kvviz does not offer."""
    from transformers import QuantizedCache
    check(backend, nbits, residual_length)
    if backend == "fp8":
        return QuantizedCache(backend="fp8", config=config)
    return QuantizedCache(backend=backend, config=config, nbits=nbits, residual_length=residual_length,
                          q_group_size=group_size(head_dim_of(config)))


@dataclass(frozen=True)
class QuantBytes:
    """Bytes a quantized cache holds, all layers, K + V."""

    payload_bytes: int = 0  # the packed quantized values
    scale_bytes: int = 0  # scales and zero points
    residual_bytes: int = 0  # the full-precision recent tokens
    residual_tokens: int = 0  # in the first layer

    @property
    def kv_bytes(self) -> int:
        return self.payload_bytes + self.scale_bytes + self.residual_bytes


def quantized_parts(q) -> tuple[int, int]:
    """(payload bytes, scale + zero-point bytes) of one quantized tensor, any backend."""
    if q is None:
        return 0, 0
    if isinstance(q, tuple):  # hqq: (packed, meta dict); fp8: (fp8 tensor, scale)
        data, meta = q
        extra = [meta["scale"], meta["zero"]] if isinstance(meta, dict) else [meta]
        return data.nbytes, sum(t.nbytes for t in extra if isinstance(t, torch.Tensor))
    packed = q._data  # optimum-quanto WeightQBitsTensor: PackedTensor(_data uint8), _scale, _shift
    return getattr(packed, "_data", packed).nbytes, q._scale.nbytes + q._shift.nbytes


def measure(cache) -> QuantBytes:
    """Bytes held by a QuantizedCache right now, read from its tensors."""
    payload = scales = residual = 0
    for layer in cache.layers:
        for q in (layer._quantized_keys, layer._quantized_values):
            p, s = quantized_parts(q)
            payload, scales = payload + p, scales + s
        residual += sum(t.nbytes for t in (layer.keys, layer.values) if isinstance(t, torch.Tensor))
    first = cache.layers[0].keys if cache.layers else None
    tokens = first.shape[-2] if isinstance(first, torch.Tensor) and first.dim() == 4 else 0
    return QuantBytes(payload, scales, residual, tokens)


def residual_tokens(decode_steps: int, backend: str, residual_length: int) -> int:
    """Tokens in the full-precision residual after the prompt and `decode_steps` one-token updates:
    the prompt is quantized whole; the residual grows by one per step and is flushed on reaching
    `residual_length` (transformers' QuantizedLayer.update). fp8 has none."""
    return 0 if backend == "fp8" else decode_steps % residual_length


def formula(*, layers: int, kv_heads: int, head_dim: int, tokens: int, decode_steps: int, backend: str,
            nbits: int, residual_length: int, elem_bytes: int, batch: int = 1) -> QuantBytes:
    """What a quantized cache should hold (K + V, all layers), from shapes alone."""
    resid = residual_tokens(decode_steps, backend, residual_length)
    quant_values = 2 * layers * batch * kv_heads * (tokens - resid) * head_dim
    if backend == "fp8":
        scale = 2 * layers * 4  # one float32 scale per tensor
        return QuantBytes(quant_values, scale, 0, 0)
    group = group_size(head_dim)
    groups = quant_values // group
    scale = groups * 2 * elem_bytes  # a scale and a zero point per group, in the model's dtype
    residual = 2 * layers * batch * kv_heads * resid * head_dim * elem_bytes
    return QuantBytes(payload_bytes(quant_values // (2 * layers), group, nbits, backend) * 2 * layers,
                      scale, residual, resid)


def payload_bytes(values: int, group: int, nbits: int, backend: str) -> int:
    """Packed bytes of one tensor of `values` values. quanto lays them out as (values / group,
    group) and packs 8 / nbits rows per byte row, padding the last; hqq packs along the group."""
    if backend == "quanto":
        return math.ceil(values // group * nbits / 8) * group
    return values * nbits // 8
