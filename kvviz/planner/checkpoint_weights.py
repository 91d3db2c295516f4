"""Weight bytes as a checkpoint stores them, tensor by tensor, from its `quantization_config`.

The architecture's tensors come from kvviz.planner.params (built on the meta device, shapes only). Each
tensor is either kept in the model dtype (`torch_dtype` / `dtype`, bf16 when the config does not
say) or stored in the checkpoint's quantized format, with that format's scales and zeros:

* **fp8** (DeepSeek-V3/R1, Kimi K2, Qwen3-FP8): 1 byte per value, and one float32 scale per
  `weight_block_size` block (per tensor without blocks). Linear weights only; embeddings,
  lm_head, routers and norms stay in the model dtype.
* **mxfp4** (gpt-oss): the routed experts' weights only, 4 bits per value plus one 8-bit scale
  per 32 values (4.25 bits); attention, router, embeddings and lm_head stay bf16.
* **awq / gptq**: `bits` per value packed, per group of `group_size` inputs one fp16 scale and
  one `bits`-wide zero point; GPTQ adds an int32 `g_idx` per input channel.
* **bitsandbytes**: 4-bit (nf4/fp4, one float32 absmax per 64 values, or with double
  quantization one 8-bit absmax per 64 plus one float32 per 256 of those) or 8-bit (int8 plus
  one float32 scale per output row).
* **compressed-tensors**: the first config group's weight scheme (`num_bits`, `strategy` tensor
  / channel / group / block / tensor_group), scales in the model dtype (fp8 for 4-bit float
  groups of 16, NVFP4), zeros when not symmetric.

Modules named in `modules_to_not_convert` / `ignore` / `ignored_layers` /
`llm_int8_skip_modules` stay unquantized (patterns: `re:` regex, `*` glob over the dotted name,
else a substring, as transformers and vLLM match them). A method not listed here is counted in
the model dtype and says so. Imports only the standard library and kvviz.planner.params.
"""
from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass

from kvviz.planner import params

_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
_SKIP_KEYS = ("modules_to_not_convert", "ignore", "ignored_layers", "llm_int8_skip_modules")
_EMBEDDING = re.compile(r"(^|\.)(embed_tokens|lm_head|wte|wpe|embeddings?|word_embeddings)(\.|$)")
_ROUTER = re.compile(r"(^|\.)(gate|router)(\.weight)?$")
_EXPERT_WEIGHT = re.compile(r"(^|\.)experts\.(gate_up_proj|down_proj|up_proj|gate_proj)$")


@dataclass(frozen=True)
class CheckpointWeights:
    total_bytes: int  # every tensor as the checkpoint stores it (scales and zeros included)
    active_bytes: int  # what one token reads: routed experts count k / E of their bytes
    label: str  # the format in words, e.g. "mxfp4 experts + bf16"
    quantized_params: int  # parameters stored in the quantized format
    params_total: int


def model_dtype_bytes(cfg: dict) -> int:
    """Bytes of an unquantized value: the config's torch_dtype / dtype, bf16 when unsaid."""
    fields = {**cfg, **cfg["text_config"]} if isinstance(cfg.get("text_config"), dict) else cfg
    dtype = fields.get("torch_dtype") or fields.get("dtype") or cfg.get("torch_dtype")
    return _DTYPE_BYTES.get(str(dtype).replace("torch.", ""), 2)


def _module_name(tensor: params.Tensor) -> str:
    name = tensor.name
    for suffix in (".weight", ".bias"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _matches(module: str, pattern: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], module) is not None
    if "*" in pattern or "?" in pattern:
        parts = module.split(".")
        return any(fnmatch.fnmatchcase(".".join(parts[:i]), pattern) for i in range(1, len(parts) + 1))
    return pattern in module


def skipped_patterns(qcfg: dict) -> list[str]:
    """Every module pattern the config keeps unquantized."""
    out: list[str] = []
    for key in _SKIP_KEYS:
        value = qcfg.get(key)
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, list):
            out.extend(str(v) for v in value)
    return out


def is_linear_weight(tensor: params.Tensor) -> bool:
    """A matrix a quantized Linear would hold: ≥ 2-D, not a bias, embedding, router or conv."""
    name = tensor.name
    if len(tensor.shape) < 2 or name.endswith("bias") or "conv" in name or "norm" in name:
        return False
    module = _module_name(tensor)
    return not (_EMBEDDING.search(module) or _ROUTER.search(module))


# ------------------------------------------------------------------ per-format tensor bytes


def _in_out(tensor: params.Tensor) -> tuple[int, int, int]:
    """(matrices, output rows, input columns): a fused 3-D expert tensor is E matrices."""
    *lead, rows, cols = tensor.shape
    return math.prod(lead) if lead else 1, rows, cols


def _fp8_bytes(tensor: params.Tensor, qcfg: dict) -> int:
    block = qcfg.get("weight_block_size")
    mats, rows, cols = _in_out(tensor)
    if isinstance(block, list) and len(block) == 2:
        scales = mats * math.ceil(rows / block[0]) * math.ceil(cols / block[1])
    else:
        scales = mats
    return tensor.numel + 4 * scales


def _mxfp4_bytes(tensor: params.Tensor, _qcfg: dict) -> int:
    return tensor.numel // 2 + math.ceil(tensor.numel / 32)


def _group_count(cols: int, group_size) -> int:
    return 1 if not group_size or group_size < 0 else math.ceil(cols / group_size)


def _awq_gptq_bytes(tensor: params.Tensor, qcfg: dict) -> int:
    bits = int(qcfg.get("bits") or qcfg.get("w_bit") or 4)
    mats, rows, cols = _in_out(tensor)
    groups = mats * rows * _group_count(cols, qcfg.get("group_size") or qcfg.get("q_group_size"))
    payload = math.ceil(tensor.numel * bits / 8)
    out = payload + 2 * groups + math.ceil(groups * bits / 8)  # fp16 scales, packed zeros
    if qcfg.get("quant_method") == "gptq":
        out += 4 * mats * cols  # g_idx: one int32 per input channel
    return out


def _bnb_bytes(tensor: params.Tensor, qcfg: dict) -> int:
    if qcfg.get("load_in_8bit"):
        _, rows, _ = _in_out(tensor)
        return tensor.numel + 4 * rows
    blocks = math.ceil(tensor.numel / 64)
    if qcfg.get("bnb_4bit_use_double_quant"):
        return tensor.numel // 2 + blocks + 4 * math.ceil(blocks / 256)
    return tensor.numel // 2 + 4 * blocks


def _compressed_scheme(qcfg: dict) -> dict:
    groups = qcfg.get("config_groups") or {}
    for group in groups.values():
        if isinstance(group, dict) and isinstance(group.get("weights"), dict):
            return group["weights"]
    return {}


def _compressed_bytes(tensor: params.Tensor, qcfg: dict, dtype_bytes: int = 2) -> int:
    w = _compressed_scheme(qcfg)
    bits = int(w.get("num_bits") or 8)
    mats, rows, cols = _in_out(tensor)
    strategy = w.get("strategy") or "tensor"
    if strategy == "channel":
        scales = mats * rows
    elif strategy in ("group", "tensor_group"):
        scales = mats * rows * _group_count(cols, w.get("group_size"))
    elif strategy == "block" and isinstance(w.get("block_structure"), list):
        b0, b1 = w["block_structure"]
        scales = mats * math.ceil(rows / b0) * math.ceil(cols / b1)
    else:
        scales = mats
    scale_bytes = 1 if (bits == 4 and w.get("type") == "float") else dtype_bytes
    zeros = 0 if w.get("symmetric", True) else scales
    return math.ceil(tensor.numel * bits / 8) + (scales + zeros) * scale_bytes


_FORMATS = {"fp8": _fp8_bytes, "mxfp4": _mxfp4_bytes, "awq": _awq_gptq_bytes,
            "gptq": _awq_gptq_bytes, "bitsandbytes": _bnb_bytes,
            "compressed-tensors": _compressed_bytes}


def _quantized_here(method: str, tensor: params.Tensor, skipped: list[str]) -> bool:
    if any(_matches(_module_name(tensor), p) for p in skipped):
        return False
    if method == "mxfp4":  # gpt-oss: only the experts' fused matrices are MXFP4
        return tensor.routed and bool(_EXPERT_WEIGHT.search(tensor.name))
    return is_linear_weight(tensor)


def format_label(qcfg: dict | None, dtype_bytes: int) -> str:
    """The checkpoint's weight format in words."""
    base = {4: "fp32", 2: "bf16"}.get(dtype_bytes, "bf16")
    if not qcfg:
        return base
    method = str(qcfg.get("quant_method", "?"))
    if method == "fp8":
        block = qcfg.get("weight_block_size")
        scale = f"{block[0]}×{block[1]} block scales" if isinstance(block, list) else "tensor scales"
        return f"fp8 ({scale}) + {base}"
    if method == "mxfp4":
        return f"mxfp4 experts + {base}"
    if method in ("awq", "gptq"):
        bits = qcfg.get("bits") or qcfg.get("w_bit") or 4
        return f"{method} int{bits} g{qcfg.get('group_size') or qcfg.get('q_group_size')} + {base}"
    if method == "bitsandbytes":
        return ("bnb int8" if qcfg.get("load_in_8bit") else
                f"bnb {qcfg.get('bnb_4bit_quant_type', 'nf4')}") + f" + {base}"
    if method == "compressed-tensors":
        w = _compressed_scheme(qcfg)
        return (f"compressed-tensors {w.get('type', 'int')}{w.get('num_bits', '?')} "
                f"{w.get('strategy', '')} + {base}").replace("  ", " ")
    return f"{base} ({method} not modelled)"


def checkpoint_weights(cfg: dict) -> CheckpointWeights:
    """The bytes a checkpoint with this config.json holds; params.UnknownArchitecture when the
    architecture cannot be built."""
    tensors = params.parameter_tensors(cfg)
    qcfg = cfg.get("quantization_config") if isinstance(cfg.get("quantization_config"), dict) else None
    dtype_bytes = model_dtype_bytes(cfg)
    method = str(qcfg.get("quant_method", "")) if qcfg else ""
    rule = _FORMATS.get(method)
    skipped = skipped_patterns(qcfg) if qcfg else []
    num, per_token = params.moe_counts(cfg)
    total = active = quantized = 0
    for t in tensors:
        if rule is not None and _quantized_here(method, t, skipped):
            size, quantized = rule(t, qcfg), quantized + t.numel
        else:
            size = t.numel * dtype_bytes
        total += size
        active += params.active_share(t, num, per_token, size)
    return CheckpointWeights(total, active, format_label(qcfg, dtype_bytes), quantized,
                             sum(t.numel for t in tensors))
