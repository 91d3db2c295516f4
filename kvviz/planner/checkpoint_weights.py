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
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache

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


# ------------------------------------------------------------------ as vLLM holds them, by part

_DECODER_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_NOT_DECODER = ("vision", "visual", "audio", "image", "multi_modal", "mm_projector")
_LM_HEAD = re.compile(r"(^|\.)lm_head(\.|$)")
DTYPE_OVERRIDES = ("fp32", "bf16", "fp16")  # vLLM's --dtype: every parameter in that dtype
QUANT_OVERRIDES = {"fp8": 1.0, "int8": 1.0625, "int4": 0.5625}  # bytes per value, group scales in
# MXFP4 experts as vLLM lays them out for its MoE kernel: (hidden, intermediate) rounded up to these
# multiples. Marlin (GPUs without native FP4: Ampere, Ada; Hopper before the Triton path) and
# FlashInfer TRT-LLM (Blackwell) from vLLM 0.32's fused_moe/oracle/mxfp4.py:844-852; ROCm pre-CDNA4
# Triton 128 / 128 (lines 873-888). Hopper's Triton path: hidden to 256, fitted to gpt-oss-120b's
# 64.38 GiB ("Using Triton backend", vllm-project/vllm#33155, v0.14.1) and gpt-oss-20b's 13.64 GiB
# (llm-d-planner v0.19.0 log); with Marlin gpt-oss-120b loads 65.97 GiB (vllm-project/vllm#23278,
# "leveraging the Marlin kernel", v0.10). The checkpoint itself holds 60.77 / 12.82 GiB.
MXFP4_ALIGN = {"marlin": (256, 128), "triton_hopper": (256, 1), "trtllm": (256, 128), "rocm": (128, 128)}
MXFP4_TRITON_HOPPER_FROM = (0, 14)  # Marlin in the 0.10-0.11 logs, Triton in 0.14.1's


def mxfp4_kernel(arch: str | None, version: tuple[int, int, int]) -> str | None:
    """Which MXFP4 MoE kernel vLLM uses on this GPU generation (None: unknown GPU, no padding)."""
    if arch == "hopper":
        return "triton_hopper" if version[:2] >= MXFP4_TRITON_HOPPER_FROM else "marlin"
    if arch == "blackwell":
        return "trtllm"
    if arch in ("cdna3", "cdna4"):
        return "rocm"
    return "marlin" if arch in ("ampere", "ada", "turing") else None


@dataclass(frozen=True, kw_only=True)
class WeightParts:
    """A model's weight bytes by where vLLM places them: the input embedding (first pipeline stage),
    each decoder layer, the output head (last stage; 0 when tied to the embedding), a multimodal
    model's vision tower and projector (first stage) and the final norm (last stage)."""

    embedding: int
    lm_head: int
    layers: tuple[int, ...]
    other: int  # a vision tower, a projector: the first stage
    label: str
    final: int = 0  # the final norm and anything else after the layers: the last stage

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + sum(self.layers) + self.other + self.final

    def stage_bytes(self, layer_counts: list[int]) -> list[int]:
        """Bytes each pipeline stage holds (before the TP split), for stages of these layer counts.
        A head tied to the embedding is a copy of its own on the last stage when there are several."""
        out, start = [], 0
        for i, count in enumerate(layer_counts):
            b = sum(self.layers[start:start + count])
            start += count
            if i == 0:
                b += self.embedding + self.other
            if i == len(layer_counts) - 1:
                b += self.final + (self.lm_head or (self.embedding if len(layer_counts) > 1 else 0))
            out.append(b)
        return out


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def _mxfp4_padded(tensor: params.Tensor, cfg: dict, align: tuple[int, int] | None) -> int:
    """MXFP4 bytes of an expert tensor padded to the kernel's alignment (one hidden dimension and
    one intermediate dimension per expert matrix)."""
    if not align:
        return _mxfp4_bytes(tensor, {})
    fields = {**cfg, **cfg["text_config"]} if isinstance(cfg.get("text_config"), dict) else cfg
    hidden, inter = int(fields.get("hidden_size") or 1), int(fields.get("intermediate_size") or 1)
    scale = (_round_up(hidden, align[0]) / hidden) * (_round_up(inter, align[1]) / inter)
    numel = math.ceil(tensor.numel * scale)
    return numel // 2 + math.ceil(numel / 32)


def _override_bytes(tensor: params.Tensor, override: str, dtype_bytes: int) -> int:
    if override in DTYPE_OVERRIDES:
        return tensor.numel * {"fp32": 4, "bf16": 2, "fp16": 2}[override]
    if _DECODER_LAYER.search(tensor.name) and not _non_decoder(tensor.name) and is_linear_weight(tensor):
        return math.ceil(tensor.numel * QUANT_OVERRIDES[override])
    return tensor.numel * dtype_bytes  # embeddings, LM head, norms, routers, vision: the model's dtype


def _non_decoder(name: str) -> bool:
    return any(word in name for word in _NOT_DECODER)


def _tensor_bytes(t: params.Tensor, cfg: dict, qcfg: dict | None, override: str | None,
                  dtype_bytes: int, align: tuple[int, int] | None) -> int:
    if override:
        return _override_bytes(t, override, dtype_bytes)
    method = str(qcfg.get("quant_method", "")) if qcfg else ""
    rule = _FORMATS.get(method)
    if rule is None or not _quantized_here(method, t, skipped_patterns(qcfg)):
        return t.numel * dtype_bytes
    if method == "mxfp4":
        return _mxfp4_padded(t, cfg, align)
    return rule(t, qcfg)


def weight_parts(cfg: dict, override: str | None = None, arch: str | None = None) -> WeightParts:
    """The weights by part, as the checkpoint stores them or, with `override`, as vLLM holds them
    with `--dtype` (fp32 / bf16 / fp16: every parameter) or a load-time quantization (fp8 / int8 /
    int4: the decoder layers' linear weights; embeddings, LM head, norms and vision tower stay in
    the model's dtype, as vLLM's online quantization leaves them). `arch`, an MXFP4 kernel
    ("marlin", "triton_hopper", …; mxfp4_kernel), pads MXFP4 experts as that kernel does. params.UnknownArchitecture when the
    architecture cannot be built."""
    tensors = params.parameter_tensors(cfg)
    qcfg = cfg.get("quantization_config") if isinstance(cfg.get("quantization_config"), dict) else None
    dtype_bytes = model_dtype_bytes(cfg)
    align = MXFP4_ALIGN.get(arch or "")  # `arch`: a kernel of MXFP4_ALIGN (mxfp4_kernel)
    layers: dict[int, int] = {}
    embedding = lm_head = other = final = 0
    for t in tensors:
        size = _tensor_bytes(t, cfg, qcfg, override, dtype_bytes, align)
        layer = _DECODER_LAYER.search(t.name)
        if layer and not _non_decoder(t.name):
            layers[int(layer.group(1))] = layers.get(int(layer.group(1)), 0) + size
        elif _LM_HEAD.search(_module_name(t)):
            lm_head += size
        elif _EMBEDDING.search(_module_name(t)) and not _non_decoder(t.name):
            embedding += size
        elif _non_decoder(t.name):
            other += size
        else:
            final += size
    label = format_label(qcfg, dtype_bytes) if not override else _override_label(override, dtype_bytes)
    return WeightParts(embedding=embedding, lm_head=lm_head, layers=tuple(layers[i] for i in sorted(layers)),
                       other=other, label=label, final=final)


def _override_label(override: str, dtype_bytes: int) -> str:
    if override in DTYPE_OVERRIDES:
        return override
    base = {4: "fp32", 2: "bf16"}.get(dtype_bytes, "bf16")
    return f"{override} linear layers + {base} embeddings, LM head and norms"


@lru_cache(maxsize=256)
def cached_weight_parts(config_json: str, override: str | None, arch: str | None) -> WeightParts | None:
    """weight_parts of a canonical config JSON, cached (a plan asks for it on every rerun); None
    when the architecture cannot be built or the override is not a weight format."""
    if override is not None and override not in DTYPE_OVERRIDES and override not in QUANT_OVERRIDES:
        return None
    try:
        return weight_parts(json.loads(config_json), override, arch)
    except params.UnknownArchitecture:
        return None
