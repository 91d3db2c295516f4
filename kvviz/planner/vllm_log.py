"""A pasted vLLM start-up log, read for the figures vLLM printed about its KV cache.

Only numbers leave this module: the log is untrusted text, so nothing of it is shown back but
what the patterns below parse as integers and decimals. The lines it knows, as vLLM prints them
(vLLM 0.32's `gpu_worker.py` and `kv_cache_utils.py`; older releases' spellings too):

    Available KV cache memory: 53.57 GiB
    GPU KV cache size: 438,880 tokens, Maximum concurrency for 131,072 tokens per request: 3.35x
    GPU KV cache size: 2,042,016 tokens                       (≤ 0.31: two lines)
    Maximum concurrency for 2,048 tokens per request: 997.08x
    # GPU blocks: 1381                                        (early V1)
    kv cache group sizes (16, 32) / kv lcm block sizes 32     (one line per KV cache group size)
    ... total_gpu_memory (23.58GiB) x gpu_memory_utilization (0.99) = 23.35GiB
    model weights take 21.21GiB; non_torch_memory takes 0.20GiB; PyTorch activation peak memory
    takes 0.37GiB; the rest of the memory reserved for KV Cache is 1.57GiB.   (V0's profile lines)
    Model loading took 11.55 GiB memory / Loading model weights took 67.7229 GB
    non-default args: {... 'max_model_len': 131072, 'block_size': 32, ...}
    ... with config: ... max_seq_len=131072, ... tensor_parallel_size=4, ... kv_cache_dtype=fp8

The first value of each wins (a multi-GPU log repeats them per worker).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields

from kvviz.core.errors import UserError

MAX_LOG_CHARS = 200_000  # a start-up log is a few hundred lines; the page's box and --vllm-log
GIB = 2**30
_NUM = r"([0-9][0-9,]*)"
_DEC = r"([0-9]+(?:\.[0-9]+)?)"
PATTERNS = {  # field -> pattern whose first group is its value
    "kv_memory_gib": rf"Available KV cache memory: {_DEC} ?GiB",
    "kv_memory_gib_v0": rf"reserved for KV Cache is {_DEC} ?GiB",
    "kv_cache_tokens": rf"KV cache size: {_NUM} tokens",
    "concurrency_tokens": rf"Maximum concurrency for {_NUM} tokens per request",
    "max_concurrency": rf"Maximum concurrency for [0-9,]+ tokens per request: {_DEC}x",
    "num_blocks": rf"# GPU blocks: {_NUM}",
    "group_block_sizes": r"kv cache group sizes \(([0-9, ]+)\)",
    "lcm_block_size": rf"kv lcm block sizes {_NUM}",
    "total_gpu_gib": rf"total_gpu_memory \({_DEC} ?GiB\)",
    "gpu_memory_utilization": rf"gpu_memory_utilization \({_DEC}\)",
    "weights_gib": rf"model weights take {_DEC} ?GiB",
    "weights_loaded_gib": rf"(?:Model loading took|Loading model weights took) {_DEC} ?Gi?B",
    "non_torch_gib": rf"non_torch_memory takes {_DEC} ?GiB",
    "activation_peak_gib": rf"activation peak memory takes {_DEC} ?GiB",
    "max_model_len": rf"(?:'max_model_len': |max_seq_len=){_NUM}",
    "block_size": rf"(?:'block_size': |attention block size to ){_NUM}",
    "tensor_parallel_size": rf"(?:'tensor_parallel_size': |tensor_parallel_size=){_NUM}",
    "kv_cache_dtype": r"(?:'kv_cache_dtype': '|kv_cache_dtype=)(auto|fp8[a-z0-9_]*|bfloat16|float16|float32)",
    "vllm_version": r"\(v([0-9]+\.[0-9]+(?:\.[0-9]+)?)[^)]*\) with config",
}
_COMPILED = {name: re.compile(p) for name, p in PATTERNS.items()}


@dataclass(frozen=True)
class LogFacts:
    """What a vLLM start-up log printed about its KV cache (None: the log did not say)."""

    kv_memory_bytes: int | None = None  # from GiB with 2 decimals: ± 0.005 GiB
    kv_cache_tokens: int | None = None
    concurrency_tokens: int | None = None  # the max_model_len the concurrency is given for
    max_concurrency: float | None = None
    num_blocks: int | None = None
    group_block_sizes: tuple[int, ...] = ()
    block_size: int | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int | None = None
    kv_cache_dtype: str | None = None
    total_gpu_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    weights_bytes: int | None = None
    non_torch_bytes: int | None = None
    activation_peak_bytes: int | None = None
    vllm_version: str | None = None

    @property
    def found(self) -> int:
        """How many figures the log gave."""
        return sum(1 for f in fields(self) if getattr(self, f.name) not in (None, ()))


class LogError(UserError):
    """A pasted log kvviz cannot read; its message is one sentence for the reader."""


def _first(text: str, name: str) -> str | None:
    match = _COMPILED[name].search(text)
    return match.group(1) if match else None


def _int(text: str | None) -> int | None:
    return int(text.replace(",", "")) if text else None


def _gib(text: str | None) -> int | None:
    return round(float(text) * GIB) if text else None


def parse_log(text: str) -> LogFacts:
    """The figures a vLLM start-up log printed; LogError when it is too long or has none."""
    if len(text) > MAX_LOG_CHARS:
        raise LogError(f"the log is {len(text):,} characters; kvviz reads up to {MAX_LOG_CHARS:,} "
                       "(paste the lines from start-up to 'Maximum concurrency')")
    get = lambda name: _first(text, name)  # noqa: E731 - a local shorthand
    groups = get("group_block_sizes")
    facts = LogFacts(
        kv_memory_bytes=_gib(get("kv_memory_gib") or get("kv_memory_gib_v0")),
        kv_cache_tokens=_int(get("kv_cache_tokens")),
        concurrency_tokens=_int(get("concurrency_tokens")),
        max_concurrency=float(get("max_concurrency")) if get("max_concurrency") else None,
        num_blocks=_int(get("num_blocks")),
        group_block_sizes=tuple(int(g) for g in groups.replace(" ", "").split(",") if g) if groups else (),
        block_size=_int(get("block_size")) or _int(get("lcm_block_size")),
        max_model_len=_int(get("max_model_len")) or _int(get("concurrency_tokens")),
        tensor_parallel_size=_int(get("tensor_parallel_size")),
        kv_cache_dtype=get("kv_cache_dtype"),
        total_gpu_bytes=_gib(get("total_gpu_gib")),
        gpu_memory_utilization=float(get("gpu_memory_utilization")) if get("gpu_memory_utilization") else None,
        weights_bytes=_gib(get("weights_gib") or get("weights_loaded_gib")),
        non_torch_bytes=_gib(get("non_torch_gib")),
        activation_peak_bytes=_gib(get("activation_peak_gib")),
        vllm_version=get("vllm_version"))
    if facts.kv_memory_bytes is None and facts.kv_cache_tokens is None and facts.num_blocks is None:
        raise LogError("no KV cache figures found: paste the lines vLLM prints at start-up, "
                       "'Available KV cache memory: … GiB' and 'GPU KV cache size: … tokens'")
    return facts
