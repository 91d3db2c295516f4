"""A pasted vLLM start-up log, read for the figures vLLM printed about its memory and KV cache.

Only numbers and kvviz's own names leave this module: the log is untrusted text, so nothing of it is
shown back but what the patterns below parse as integers and decimals, and a failure is named by
kvviz (`FAILURES`), never quoted. The wordings it knows, release by release:

    Available KV cache memory: 53.57 GiB          (V1; negative when the budget is: "-2.14 GiB")
    GPU KV cache size: 438,880 tokens, Maximum concurrency for 131,072 tokens per request: 3.35x
    GPU KV cache size: 2,042,016 tokens           (0.8-0.31: on a line of its own)
    # GPU blocks: 1381 / # cuda blocks: 5302, # CPU blocks: 7767 / # CUDA blocks: 6001   (V0, early V1)
    kv cache group sizes (16, 32) / kv lcm block sizes 32
    Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB
      peak_torch_memory=17.06GiB ... non_torch_memory=0.35GiB kv_cache_size=3.81GiB
      gpu_memory_utilization=0.90                  (V0 0.6.4, one line)
    total_gpu_memory 79.22GiB / model weights take 14.96GiB / non_torch_memory 1.79GiB /
      PyTorch activation peak memory 1.26GiB / available_kv_cache_memory 53.29GiB   (V0 0.6.5-0.6.6)
    ... total_gpu_memory (23.58GiB) x gpu_memory_utilization (0.99) = 23.35GiB
    model weights take 21.21GiB; non_torch_memory takes 0.20GiB; PyTorch activation peak memory
      takes 0.37GiB; the rest of the memory reserved for KV Cache is 1.57GiB.   (V0 0.7-0.10, V1 0.8-0.9)
    Memory profiling takes 18.17 seconds. Total non KV cache memory: 17.12GiB; torch peak memory
      increase: 1.89GiB; non-torch forward increase memory: 0.25GiB; weights memory: 14.99GiB.  (V1)
    Estimated CUDA graph memory: 0.84 GiB total / Graph capturing finished in 5 secs, took 0.47 GiB
    Model loading took 11.55 GiB memory / Loading model weights took 67.7229 GB (GiB, labelled GB)
    non-default args: {... 'max_model_len': 131072, 'block_size': 32, 'gpu_memory_utilization': 0.95 ...}
    Initializing a V1 LLM engine (v0.19.0) with config: ... max_seq_len=131072, tensor_parallel_size=4 ...
    Initializing an LLM engine (v0.6.4) / a V0 LLM engine (v0.7.3) / vLLM API server version 0.10.1.1

and the failures: "The model's max seq len (L) is larger than the maximum number of tokens that can
be stored in KV cache (N)" (V0), "To serve at least one request with the model's max seq len …"
(V1), "No available memory for the cache blocks", "Free memory on device … on startup is less than
desired GPU memory utilization", "CUDA out of memory occurred when warming up sampler", and a bare
"CUDA out of memory" (named by where in the start-up it came: loading the weights, capturing CUDA
graphs, or after the KV cache was sized).

A log of several workers prints the memory lines once per worker: kvviz takes the smallest, as vLLM
does (every worker keeps the smallest worker's block count). Otherwise the first value of each wins.

Every figure is bounded before it is used (a log travels in share links): at most MAX_FIGURE_CHARS
characters before it is converted (no 400-digit GiB becoming infinity, no 5,000-digit count), each
field within `BOUNDS`, and on a hosted kvviz the log's max_model_len and TP × PP within the page's
own caps (kvviz.app.hosted). Each refusal is one LogError sentence.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields

from kvviz.app import hosted
from kvviz.core.errors import UserError

MAX_LOG_CHARS = 200_000  # a start-up log is a few hundred lines; the page's box and --vllm-log
MAX_FIGURE_CHARS = 24  # "1,234,567,890,123,456" or "-12345.678": longer is no figure vLLM prints
GIB = 2**30
MIB = 2**20
_NUM = r"([0-9][0-9,]*)"
_DEC = r"(-?[0-9]+(?:\.[0-9]+)?)"
PATTERNS = {  # field -> pattern whose first group is its value
    "kv_memory_gib": rf"Available KV cache memory: {_DEC} ?GiB",
    "kv_memory_gib_v0": rf"(?:reserved for KV Cache is |available_kv_cache_memory\s+|kv_cache_size=){_DEC} ?GiB",
    "kv_cache_tokens": rf"KV cache size: {_NUM} tokens",
    "concurrency_tokens": rf"Maximum concurrency for {_NUM} tokens per request",
    "max_concurrency": rf"Maximum concurrency for [0-9,]+ tokens per request: {_DEC}x",
    "num_blocks": rf"# (?:GPU|cuda|CUDA) blocks: {_NUM}",
    "group_block_sizes": r"kv cache group sizes \(([0-9, ]+)\)",
    "lcm_block_size": rf"kv lcm block sizes {_NUM}",
    "total_gpu_gib": rf"total_gpu_memory(?: \(|=|\s+){_DEC} ?GiB",
    "total_memory_gib": rf"total_memory={_DEC} ?GiB",
    "gpu_memory_utilization": rf"(?:gpu_memory_utilization(?: \(|=|\s+)|'gpu_memory_utilization': |Requested memory: ){_DEC}",
    "weights_gib": rf"(?:model weights take|weights memory:)\s+{_DEC} ?GiB",
    "weights_loaded_gib": rf"(?:Model loading took|Loading model weights took) {_DEC} ?Gi?B",
    "non_torch_gib": rf"(?:non_torch_memory takes |non_torch_memory\s+|non_torch_memory=|non-torch forward increase memory: ){_DEC} ?GiB",
    "activation_peak_gib": rf"(?:activation peak memory takes |activation peak memory\s+|torch peak memory increase: ){_DEC} ?GiB",
    "peak_torch_gib": rf"peak_torch_memory={_DEC} ?GiB",
    "cuda_graph_gib": rf"(?:Estimated CUDA graph memory: |Graph capturing finished in [0-9]+ secs?, took ){_DEC} ?GiB",
    "max_model_len": rf"(?:'max_model_len': |max_seq_len=){_NUM}",
    "block_size": rf"(?:'block_size': |attention block size to ){_NUM}",
    "tensor_parallel_size": rf"(?:'tensor_parallel_size': |tensor_parallel_size=){_NUM}",
    "pipeline_parallel_size": rf"(?:'pipeline_parallel_size': |pipeline_parallel_size=){_NUM}",
    "max_num_seqs": rf"(?:'max_num_seqs': |Defaulting max_num_seqs to |max_num_seqs=){_NUM}",
    "max_num_batched_tokens": rf"(?:'max_num_batched_tokens': |max_num_batched_tokens=){_NUM}",
    "kv_cache_dtype": r"(?:'kv_cache_dtype': '|kv_cache_dtype=)(auto|fp8[a-z0-9_]*|bfloat16|float16|float32)",
    "vllm_version": r"(?:Initializing an? (?:V[01] )?LLM engine \(v|vLLM API server version |█\s+version )"
                    r"([0-9]+\.[0-9]+(?:\.[0-9]+)?)",
    "engine": r"Initializing (an|a V0|a V1) LLM engine",
    "refused_tokens": rf"maximum number of tokens that can be stored in KV cache \({_NUM}\)",
    "refused_len": rf"The model's max seq len \({_NUM}\) is larger than",
    "needed_kv_gib": rf"max seq len \([0-9]+\), \({_DEC} GiB KV cache is needed",
    "estimated_len": rf"estimated maximum model length is {_NUM}",
    "warmup_seqs": rf"out of memory occurred when warming up sampler with {_NUM} dummy requests",
    "oom_tried": rf"CUDA out of memory\. Tried to allocate {_DEC} ?(GiB|MiB)",
}
_COMPILED = {name: re.compile(p) for name, p in PATTERNS.items()}
_WORKER_KV = ("kv_memory_gib", "kv_memory_gib_v0")  # per worker: the smallest wins
# kvviz's names for how a start-up ended, in the order they are checked
FAILURES = {
    "weights_load": "out of memory while loading the weights",
    "free_memory": "the requested memory was not free at start-up",
    "no_kv_memory": "no memory for the cache blocks",
    "kv_too_small": "the KV cache could not hold one request of max_model_len",
    "warmup": "out of memory warming up the sampler",
    "cuda_graphs": "out of memory capturing CUDA graphs",
    "oom_after_kv": "out of memory after the KV cache was sized",
    "oom": "out of memory",
}


@dataclass(frozen=True, kw_only=True)
class LogFacts:
    """What a vLLM start-up log printed (None: the log did not say)."""

    kv_memory_bytes: int | None = None  # from GiB with 2 decimals: ± 0.005 GiB; the smallest worker's
    kv_cache_tokens: int | None = None
    concurrency_tokens: int | None = None  # the max_model_len the concurrency is given for
    max_concurrency: float | None = None
    num_blocks: int | None = None
    group_block_sizes: tuple[int, ...] = ()
    block_size: int | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    kv_cache_dtype: str | None = None
    total_gpu_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    weights_bytes: int | None = None
    non_torch_bytes: int | None = None
    activation_peak_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    vllm_version: str | None = None
    vllm_engine: str | None = None  # "V0" / "V1"
    workers: int = 0  # how many workers printed their KV memory
    failure: str | None = None  # a key of FAILURES when the start-up did not finish
    refused_tokens: int | None = None  # V0: the tokens the KV cache could hold when it refused
    needed_kv_bytes: int | None = None  # V1: what one request of max_model_len needed
    estimated_max_model_len: int | None = None
    oom_bytes: int | None = None  # the allocation that failed

    @property
    def found(self) -> int:
        """How many figures the log gave."""
        return sum(1 for f in fields(self) if getattr(self, f.name) not in (None, (), 0))

    @property
    def failure_words(self) -> str | None:
        return FAILURES.get(self.failure or "")


class LogError(UserError):
    """A pasted log kvviz cannot read; its message is one sentence for the reader."""


TIB = 2**40
BOUNDS = {  # LogFacts field -> (lowest, highest) kvviz plans with; past them the log is refused
    "kv_memory_bytes": (-1024 * TIB, 1024 * TIB), "kv_cache_tokens": (0, 10**12),
    "concurrency_tokens": (1, 10**9), "max_concurrency": (0, 10**9), "num_blocks": (0, 10**10),
    "block_size": (1, 2**16), "max_model_len": (1, 10**9), "tensor_parallel_size": (1, 64),
    "pipeline_parallel_size": (1, 64), "total_gpu_bytes": (1, 1024 * TIB), "gpu_memory_utilization": (0, 1),
    "weights_bytes": (0, 1024 * TIB), "non_torch_bytes": (-1024 * TIB, 1024 * TIB),
    "activation_peak_bytes": (-1024 * TIB, 1024 * TIB), "cuda_graph_bytes": (0, 1024 * TIB),
    "max_num_seqs": (1, 10**6), "max_num_batched_tokens": (1, 10**9), "refused_tokens": (0, 10**12),
    "needed_kv_bytes": (0, 1024 * TIB), "estimated_max_model_len": (0, 10**9), "oom_bytes": (0, 1024 * TIB),
}


def _figure(text: str) -> str:
    """`text` if it is short enough to be a figure vLLM printed, else LogError."""
    if len(text) > MAX_FIGURE_CHARS:
        raise LogError(f"the log holds a figure {len(text):,} characters long; kvviz reads figures of "
                       f"at most {MAX_FIGURE_CHARS} characters")
    return text


def _check_bounds(facts: LogFacts) -> None:
    for name, (low, high) in BOUNDS.items():
        value = getattr(facts, name)
        if value is not None and not low <= value <= high:
            raise LogError(f"the log gives {name} = {value:,}; kvviz plans with {name} from {low:,} "
                           f"to {high:,}")
    if any(not 1 <= g <= 2**16 for g in facts.group_block_sizes):
        raise LogError(f"the log gives kv cache group sizes past what kvviz plans with (1 to {2**16:,})")


def _within_hosted_caps(facts: LogFacts) -> None:
    """On a hosted kvviz: the log's settings under the caps the page's own boxes have."""
    gpus = (facts.tensor_parallel_size or 1) * (facts.pipeline_parallel_size or 1)
    try:
        hosted.policy_from_env().check_limits(
            None, plan_tokens={"the log's max_model_len": facts.max_model_len or 0}, plan_gpus=gpus)
    except UserError as err:
        raise LogError(f"{err}: kvviz plans the pasted log's settings under the same caps") from None


def _first(text: str, name: str) -> str | None:
    match = _COMPILED[name].search(text)
    return match.group(1) if match else None


def _all(text: str, name: str) -> list[str]:
    return [m.group(1) for m in _COMPILED[name].finditer(text)]


def _int(text: str | None) -> int | None:
    return int(_figure(text).replace(",", "")) if text else None


def _gib(text: str | None) -> int | None:
    return round(float(_figure(text)) * GIB) if text else None


def _worker_kv(text: str) -> tuple[int | None, int]:
    """The smallest worker's KV memory (every worker keeps the smallest count) and the workers."""
    for name in _WORKER_KV:
        values = [float(_figure(v)) for v in _all(text, name)]
        if values:
            return round(min(values) * GIB), len(values)
    return None, 0


def _oom_bytes(text: str) -> int | None:
    match = _COMPILED["oom_tried"].search(text)
    if not match:
        return None
    return round(float(_figure(match.group(1))) * (GIB if match.group(2) == "GiB" else MIB))


def _failure(text: str) -> str | None:
    """How the start-up ended, when it did not finish (kvviz's name for it)."""
    if _first(text, "refused_tokens") or _first(text, "needed_kv_gib") or "To serve at least one request" in text:
        return "kv_too_small"
    if "No available memory for the cache blocks" in text or _nothing_for_kv(text):
        return "no_kv_memory"
    if "is less than desired GPU memory utilization" in text:
        return "free_memory"
    if _first(text, "warmup_seqs"):
        return "warmup"
    if "CUDA out of memory" not in text and "OutOfMemoryError" not in text:
        return None
    oom_at = min(i for i in (text.find("CUDA out of memory"), text.find("OutOfMemoryError")) if i >= 0)
    if re.search(r"sample/sampler\.py|_dummy_sampler_run", text[max(0, oom_at - 4000):oom_at]):
        return "warmup"  # the traceback runs through vLLM's sampler (its warm-up or profile pass)
    if "capture_model" in text[oom_at - 4000:oom_at + 4000] or "Capturing CUDA graph" in text[max(0, oom_at - 2000):oom_at]:
        return "cuda_graphs"
    sized = [text.find(k) for k in ("Available KV cache memory", "reserved for KV Cache", "kv_cache_size=")]
    if any(0 <= i < oom_at for i in sized):
        return "oom_after_kv"
    loaded = [text.find(k) for k in ("Model loading took", "Loading model weights took")]
    return "oom" if any(0 <= i < oom_at for i in loaded) else "weights_load"


def _nothing_for_kv(text: str) -> bool:
    """A budget of zero or less: vLLM raises "No available memory for the cache blocks" next
    (kv_cache_utils._check_enough_kv_cache_memory; V0's raise_if_cache_size_invalid), a log cut
    before that line included."""
    return any(float(v) <= 0 for name in _WORKER_KV for v in _all(text, name)) or \
        any(_int(v) == 0 for v in _all(text, "num_blocks"))


def _engine(text: str) -> str | None:
    word = _first(text, "engine")
    return None if word is None else {"an": "V0", "a V0": "V0", "a V1": "V1"}[word]


def _weights(text: str) -> int | None:
    return _gib(_first(text, "weights_loaded_gib") or _first(text, "weights_gib"))


def _activation(text: str, weights: int | None) -> int | None:
    """The profile's activation peak; 0.6.4 prints the torch peak with the weights in it."""
    peak = _gib(_first(text, "activation_peak_gib"))
    if peak is not None:
        return peak
    torch_peak = _gib(_first(text, "peak_torch_gib"))
    return None if torch_peak is None or weights is None else torch_peak - weights


def _float(text: str | None) -> float | None:
    return float(_figure(text)) if text else None


def parse_log(text: str) -> LogFacts:
    """The figures a vLLM start-up log printed; LogError when it is too long or has none."""
    if len(text) > MAX_LOG_CHARS:
        raise LogError(f"the log is {len(text):,} characters; kvviz reads up to {MAX_LOG_CHARS:,} "
                       "(paste the lines from start-up to 'Maximum concurrency')")
    get = lambda name: _first(text, name)  # noqa: E731 - a local shorthand
    groups = get("group_block_sizes")
    kv, workers = _worker_kv(text)
    weights = _weights(text)
    failure = _failure(text)
    facts = LogFacts(
        kv_memory_bytes=kv, workers=workers,
        kv_cache_tokens=_int(get("kv_cache_tokens")),
        concurrency_tokens=_int(get("concurrency_tokens")),
        max_concurrency=_float(get("max_concurrency")),
        num_blocks=min((_int(v) for v in _all(text, "num_blocks")), default=None),
        group_block_sizes=tuple(int(g) for g in groups.replace(" ", "").split(",") if g) if groups else (),
        block_size=_int(get("block_size")) or _int(get("lcm_block_size")),
        max_model_len=_int(get("max_model_len")) or _int(get("concurrency_tokens")) or _int(get("refused_len")),
        tensor_parallel_size=_int(get("tensor_parallel_size")),
        pipeline_parallel_size=_int(get("pipeline_parallel_size")),
        kv_cache_dtype=get("kv_cache_dtype"),
        total_gpu_bytes=_gib(get("total_gpu_gib") or get("total_memory_gib")),
        gpu_memory_utilization=_float(get("gpu_memory_utilization")),
        weights_bytes=weights,
        non_torch_bytes=_gib(get("non_torch_gib")),
        activation_peak_bytes=_activation(text, weights),
        cuda_graph_bytes=_gib(get("cuda_graph_gib")),
        max_num_seqs=_int(get("max_num_seqs")),
        max_num_batched_tokens=_int(get("max_num_batched_tokens")),
        vllm_version=get("vllm_version"),
        vllm_engine=_engine(text),
        failure=failure,
        refused_tokens=_int(get("refused_tokens")),
        needed_kv_bytes=_gib(get("needed_kv_gib")),
        estimated_max_model_len=_int(get("estimated_len")),
        oom_bytes=_oom_bytes(text))
    if facts.kv_memory_bytes is None and facts.kv_cache_tokens is None and facts.num_blocks is None \
            and facts.failure is None and facts.weights_bytes is None:
        raise LogError("no KV cache figures found: paste the lines vLLM prints at start-up, "
                       "'Available KV cache memory: … GiB' and 'GPU KV cache size: … tokens'")
    _check_bounds(facts)
    _within_hosted_caps(facts)
    return facts
