"""vLLM's KV-cache budget as vLLM 0.32 computes it, each deduction modelled where a config allows.

vLLM (`v1/worker/gpu_worker.py` `determine_available_memory`, `v1/worker/utils.py`
`request_memory`, `utils/mem_utils.py` `memory_profiling`) gives the KV cache

    ceil(total_memory × gpu_memory_utilization)
      − weights − the profile run's transient activation peak − non-torch memory − CUDA graphs

where total_memory is torch's (the device's bytes, not the marketed GB), the profile run is one
forward pass of `max_num_batched_tokens` tokens followed by a sampler pass over `max_num_seqs`
rows of logits, non-torch memory is what the CUDA context, NCCL and cuBLAS workspaces take, and
the CUDA graphs' memory is measured by capturing them (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1,
the default). `--kv-cache-memory-bytes` replaces all of it: vLLM then takes that figure per GPU
and ignores gpu_memory_utilization.

kvviz models the activation peak and the sampler from the config (labelled modelled; the
formulas are below, rough by design) and cannot know the non-torch memory or the CUDA graphs'
bytes: those are left at 0 and said so, so kvviz's KV figure is an upper bound on vLLM's. A
pasted vLLM log (kvviz.planner.vllm_log) gives vLLM's own figure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 2**30
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.32's CacheConfig default
ACTIVATION_BYTES = 2  # the profile run's activations in the model's dtype (bf16 / fp16)
SAMPLER_BYTES_PER_LOGIT = 4 + 4 + 8  # fp32 logits, a sorted fp32 copy and its int64 indices
UNKNOWN = ("non-torch memory (CUDA context, NCCL, cuBLAS workspaces: typically a few hundred MiB "
           "to a few GiB, printed by vLLM only at debug level)",
           "CUDA graph memory (measured by capturing the graphs at start-up; vLLM's log prints "
           "'CUDA graph memory profiling' with the figure)")


@dataclass(frozen=True)
class ModelShape:
    """What the profile run's size depends on: the config's widths (None when it does not say)."""

    hidden_size: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None


@dataclass(frozen=True)
class VllmBudget:
    """One GPU's KV budget as vLLM computes it; `given` when --kv-cache-memory-bytes set it."""

    total_bytes: int
    gpu_memory_utilization: float
    requested_bytes: int  # ceil(total × utilization)
    weight_bytes: int
    activation_peak_bytes: int  # modelled (0 when the config lacks the widths)
    sampler_bytes: int  # modelled
    max_num_batched_tokens: int
    max_num_seqs: int
    kv_bytes: int
    given: bool = False
    unknown: tuple[str, ...] = UNKNOWN

    @property
    def deducted_bytes(self) -> int:
        """What the budget sets aside besides the weights (for the plan's overhead line)."""
        return self.total_bytes - self.weight_bytes - self.kv_bytes


def default_max_num_seqs(total_bytes: int, gpu_name: str, platform: str) -> int:
    """vLLM 0.32's default for `vllm serve` (arg_utils `_get_default_max_num_seqs...`): CPU 128;
    a GPU of ≥ 160 GiB 1,024; ≥ 70 GiB and not an A100 1,024; else 256."""
    if platform == "cpu":
        return 128
    if total_bytes >= 160 * GIB or (total_bytes >= 70 * GIB and "a100" not in gpu_name.lower()):
        return 1024
    return 256


def activation_peak_bytes(shape: ModelShape, tokens: int, tp: int) -> int:
    """Modelled: the largest transient of one decoder layer in the profile run's forward pass of
    `tokens` tokens — the residual and normed hidden states (2 × hidden) plus the MLP's gate/up
    output and its activation (3 × intermediate, split over TP) — in the model's dtype."""
    if not shape.hidden_size or not shape.intermediate_size:
        return 0
    per_token = 2 * shape.hidden_size + 3 * math.ceil(shape.intermediate_size / tp)
    return tokens * per_token * ACTIVATION_BYTES


def sampler_bytes(shape: ModelShape, max_num_seqs: int) -> int:
    """Modelled: the sampler pass over `max_num_seqs` rows of logits (fp32 logits, the sorted copy
    top-k/top-p makes and its int64 indices)."""
    return max_num_seqs * (shape.vocab_size or 0) * SAMPLER_BYTES_PER_LOGIT


def vllm_budget(shape: ModelShape, total_bytes: int, weight_bytes: int, utilization: float,
                max_num_batched_tokens: int, max_num_seqs: int, tp: int,
                kv_cache_memory_bytes: int | None = None) -> VllmBudget:
    """The KV budget per GPU as vLLM computes it (kv_cache_memory_bytes, when given, is taken as is)."""
    requested = math.ceil(total_bytes * utilization)
    activations = activation_peak_bytes(shape, max_num_batched_tokens, tp)
    sampler = sampler_bytes(shape, max_num_seqs)
    if kv_cache_memory_bytes:
        kv, given = kv_cache_memory_bytes, True
    else:
        kv, given = max(0, requested - weight_bytes - activations - sampler), False
    return VllmBudget(total_bytes, utilization, requested, weight_bytes, activations, sampler,
                      max_num_batched_tokens, max_num_seqs, kv, given)
