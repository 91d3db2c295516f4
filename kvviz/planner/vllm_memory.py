"""vLLM's KV-cache budget, every term modelled, per GPU of each pipeline stage.

vLLM (0.32's `v1/worker/gpu_worker.py` `determine_available_memory`, lines 676-744;
`utils/mem_utils.py` `memory_profiling`, lines 230-320) gives each worker

    ceil(total × gpu_memory_utilization)
      − weights − the profile run's activation peak − non-torch memory [− CUDA graphs]

and the KV cache of every worker is the smallest worker's block count. Each term here is
modelled from the config and the flags, sized by the release family's rules
(kvviz.planner.vllm_versions), and labelled modelled wherever a constant was fitted to published
start-up logs (tests/planner/data/vllm_startups.json):

* **weights** — as vLLM holds them, per stage and TP rank (kvviz.planner.checkpoint_weights
  `weight_parts`): the embedding on the first stage, the LM head on the last, MXFP4 experts padded
  for the GPU's kernel;
* **activation peak** — V1's profile run (gpu_model_runner.py `profile_run`, lines 6193-6200 in
  0.32) is a forward pass of `max_num_batched_tokens` tokens and then, on the last stage, a
  sampler pass over `max_num_seqs` rows of logits; the peak is the larger of the two. V0 from
  0.6.5 runs the same sampler pass on its driver worker (rank 0 of the last stage), whose budget is
  then the smallest and so every worker's; 0.6.0-0.6.4's logs show none. The forward pass per token: the residual, the normed input and the MLP's
  output (3 × hidden), a dense MLP's gate/up output and activation (3 × intermediate / TP) — 110 kB
  per token for Llama-3.1-8B, as vllm-project/vllm#10517 measured between 20k and 29k tokens — or, for a mixture of experts,
  vLLM's fused-MoE caches (`fused_experts_impl`: top-k × (max(2 × expert intermediate / TP,
  hidden) + expert intermediate / TP)), plus a shared expert's MLP; in the model's 16-bit dtype;
* **non-torch memory** — NCCL and custom all-reduce buffers, cuBLAS workspaces: per release at TP 1,
  2.1 GiB once TP > 1 on GPUs with peer-to-peer links (v0.19 logs: 2.06-2.13 GiB on H100), 0.25 GiB
  without (two RTX 4090, vllm-project/vllm#13061), 0.07 GiB under pipeline parallelism alone;
* **CUDA graphs** — estimated as vLLM's profiler estimates them (12 MiB per captured batch size
  plus 0.25 GiB, fitted to the v0.19 logs' "Estimated CUDA graph memory: 0.70-1.30 GiB total");
  deducted from 0.21 on, left outside the budget before.

`--kv-cache-memory-bytes` replaces the sum: vLLM then takes that figure per GPU and ignores
gpu_memory_utilization (it still runs the profile pass, and nothing checks the figure fits).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kvviz.planner.vllm_versions import Release

GIB = 2**30
MIB = 2**20
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.32's CacheConfig default (config/cache.py:102)
ACTIVATION_BYTES = 2  # the profile run's activations in the model's dtype (bf16 / fp16)
CUDA_CONTEXT_BYTES = round(0.51 * GIB)  # v0.19 H100 log: "worker init memory snapshot: … cuda_memory=0.51GiB"
NON_TORCH_TP_P2P_BYTES = round(2.1 * GIB)  # v0.19 logs, TP 2-4 on H100: 2.06-2.13 GiB
NON_TORCH_TP_PCIE_BYTES = round(0.25 * GIB)  # vllm-project/vllm#13061: TP 2 on two RTX 4090 (no P2P)
NON_TORCH_PP_BYTES = round(0.07 * GIB)  # v0.19 logs: PP 2 and PP 4, TP 1
CUDA_GRAPH_PER_SIZE_BYTES = 12 * MIB  # fitted: 51 sizes → 0.70-1.13 GiB, 83 sizes → 1.30 GiB (v0.19 logs)
CUDA_GRAPH_BASE_BYTES = GIB // 4
# vLLM's default CUDA graph capture sizes up to 512: 1, 2, 4, then steps of 8 to 256 and of 16 beyond
# (config/compilation.py); the largest is min(512, 2 × max_num_seqs) unless a model overrides it:
# gpt-oss raises it to 1,024 ("Overriding max cuda graph capture size to 1024 for performance.",
# model_executor/models/config.py:131 in the v0.19 logs).
CAPTURE_SIZE_OVERRIDES = {"gpt_oss": 1024}


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """What the profile run's size depends on (None: the config does not say)."""

    hidden_size: int | None = None
    intermediate_size: int | None = None  # a dense layer's MLP
    vocab_size: int | None = None
    expert_intermediate_size: int | None = None  # one routed expert's MLP (a MoE)
    experts_per_token: int | None = None
    shared_intermediate_size: int | None = None  # a MoE's shared expert(s)
    model_type: str = ""


@dataclass(frozen=True, kw_only=True)
class StageBudget:
    """One GPU of one pipeline stage (every TP rank of a stage holds the same)."""

    stage: int
    weight_bytes: int
    forward_bytes: int  # the profile run's forward pass
    sampler_bytes: int  # its sampler pass (last stage); 0 elsewhere
    activation_peak_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int  # estimated; in the budget only when deducted
    kv_bytes: int  # what this stage would give the KV cache (may be negative)


@dataclass(frozen=True, kw_only=True)
class VllmBudget:
    """The KV budget per GPU as vLLM computes it: the smallest stage's (`stage`)."""

    release: str  # the release family's name
    vllm_version: str
    total_bytes: int
    gpu_memory_utilization: float
    requested_bytes: int  # ceil(total × utilization)
    weight_bytes: int  # the binding stage's
    activation_peak_bytes: int
    forward_bytes: int
    sampler_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    cuda_graph_deducted: bool
    max_num_batched_tokens: int  # the profile run's tokens
    max_num_seqs: int
    kv_bytes: int  # the smallest stage's, never below 0 (vLLM refuses at 0)
    kv_bytes_signed: int  # the same before clamping: what vLLM's log prints, "-2.14 GiB"
    stage: int
    stages: tuple[StageBudget, ...]
    given: bool = False  # --kv-cache-memory-bytes set it

    @property
    def deducted_bytes(self) -> int:
        """What the budget sets aside besides the weights (for the plan's overhead line)."""
        return self.total_bytes - self.weight_bytes - self.kv_bytes

    @property
    def headroom_bytes(self) -> int:
        """Memory outside the budget once the KV cache is allocated: where vLLM captures CUDA graphs
        (before 0.21) and warms the sampler up again. total − requested − CUDA context − graphs."""
        graphs = 0 if self.cuda_graph_deducted else self.cuda_graph_bytes
        return self.total_bytes - self.requested_bytes - CUDA_CONTEXT_BYTES - graphs


def forward_bytes_per_token(shape: ModelShape, tp: int) -> int:
    """Modelled: the largest transient of one decoder layer per token in the profile run's forward
    pass (see the module docstring); 0 when the config gives no widths."""
    if not shape.hidden_size:
        return 0
    hidden = shape.hidden_size
    dense = 3 * math.ceil(shape.intermediate_size / tp) if shape.intermediate_size else 0
    moe = 0
    if shape.expert_intermediate_size and shape.experts_per_token:
        inter = math.ceil(shape.expert_intermediate_size / tp)
        moe = shape.experts_per_token * (max(2 * inter, hidden) + inter)
    shared = 3 * math.ceil(shape.shared_intermediate_size / tp) if shape.shared_intermediate_size else 0
    if not (dense or moe):
        return 0
    return (3 * hidden + max(dense, moe + shared)) * ACTIVATION_BYTES


def sampler_bytes(shape: ModelShape, max_num_seqs: int, release: Release) -> int:
    """Modelled: the profile run's sampler pass over max_num_seqs rows of logits, bytes per logit
    fitted per release family (vllm_versions); 0 before 0.6.5, where the logs show none."""
    return math.ceil(max_num_seqs * (shape.vocab_size or 0) * release.sampler_bytes_per_logit)


def non_torch_bytes(release: Release, tp: int, pp: int, p2p: bool) -> int:
    """Modelled per release: non-torch memory one worker adds between start-up and the profile."""
    if release.non_torch_scales_with_tp:
        return release.non_torch_tp1_bytes * tp
    if tp > 1:
        return NON_TORCH_TP_P2P_BYTES if p2p else NON_TORCH_TP_PCIE_BYTES
    if pp > 1:
        return NON_TORCH_PP_BYTES
    return release.non_torch_tp1_bytes


def capture_sizes(max_size: int) -> list[int]:
    """vLLM's default CUDA graph batch sizes up to max_size."""
    sizes = [1, 2, 4, *range(8, 257, 8), *range(272, max(max_size, 256) + 1, 16)]
    return [s for s in sizes if s <= max_size]


def cuda_graph_bytes(shape: ModelShape, max_num_seqs: int, enforce_eager: bool) -> int:
    """Modelled: the CUDA graphs vLLM captures (0 with --enforce-eager)."""
    if enforce_eager:
        return 0
    largest = CAPTURE_SIZE_OVERRIDES.get(shape.model_type) or min(512, 2 * max_num_seqs)
    return len(capture_sizes(largest)) * CUDA_GRAPH_PER_SIZE_BYTES + CUDA_GRAPH_BASE_BYTES


@dataclass(frozen=True, kw_only=True)
class BudgetInputs:
    """Everything vLLM's budget depends on besides the model's widths."""

    release: Release
    vllm_version: str
    total_bytes: int
    gpu_memory_utilization: float
    stage_weight_bytes: tuple[int, ...]  # one GPU of each stage
    profile_tokens: int
    max_num_seqs: int
    tp: int
    pp: int
    p2p: bool
    enforce_eager: bool = False
    kv_cache_memory_bytes: int | None = None


def _stage(shape: ModelShape, x: BudgetInputs, stage: int, requested: int) -> StageBudget:
    last = stage == len(x.stage_weight_bytes) - 1
    forward = x.profile_tokens * forward_bytes_per_token(shape, x.tp)
    # V1: every TP rank samples; V0: the driver (rank 0 of the last stage) alone, and the KV cache of
    # every worker is the smallest worker's, so the driver's budget is the deployment's
    sampler = sampler_bytes(shape, x.max_num_seqs, x.release) if last else 0
    peak = max(forward, sampler)
    non_torch = non_torch_bytes(x.release, x.tp, x.pp, x.p2p)
    graphs = cuda_graph_bytes(shape, x.max_num_seqs, x.enforce_eager)
    deducted = graphs if x.release.deducts_cuda_graphs else 0
    weights = x.stage_weight_bytes[stage]
    kv = requested - weights - peak - non_torch - deducted
    return StageBudget(stage=stage, weight_bytes=weights, forward_bytes=forward, sampler_bytes=sampler,
                       activation_peak_bytes=peak, non_torch_bytes=non_torch, cuda_graph_bytes=graphs, kv_bytes=kv)


def vllm_budget(shape: ModelShape, x: BudgetInputs) -> VllmBudget:
    """The KV budget per GPU as vLLM computes it (kv_cache_memory_bytes, when given, is taken as is)."""
    requested = math.ceil(x.total_bytes * x.gpu_memory_utilization)
    stages = tuple(_stage(shape, x, i, requested) for i in range(len(x.stage_weight_bytes)))
    binding = min(stages, key=lambda s: s.kv_bytes)
    if x.kv_cache_memory_bytes:
        signed, given = x.kv_cache_memory_bytes, True
    else:
        signed, given = binding.kv_bytes, False
    return VllmBudget(
        release=x.release.name, vllm_version=x.vllm_version, total_bytes=x.total_bytes,
        gpu_memory_utilization=x.gpu_memory_utilization, requested_bytes=requested,
        weight_bytes=binding.weight_bytes, activation_peak_bytes=binding.activation_peak_bytes,
        forward_bytes=binding.forward_bytes, sampler_bytes=max(s.sampler_bytes for s in stages),
        non_torch_bytes=binding.non_torch_bytes, cuda_graph_bytes=binding.cuda_graph_bytes,
        cuda_graph_deducted=x.release.deducts_cuda_graphs, max_num_batched_tokens=x.profile_tokens,
        max_num_seqs=x.max_num_seqs, kv_bytes=max(0, signed), kv_bytes_signed=signed,
        stage=binding.stage, stages=stages, given=given)


# After the KV cache is allocated, V1 captures its CUDA graphs (outside the budget before 0.21) and
# runs the sampler pass again (gpu_worker.compile_or_warm_up_model → _dummy_sampler_run), in what
# gpu_memory_utilization left outside the budget. Fitted to the published start-ups at 0.95 on H100
# (v0.19): gpt-oss-20b failed "warming up sampler with 1024 dummy requests" with 2.15 GiB of
# headroom (TP 1) and 2.23 GiB (TP 2, same at 0.90 started with 6.2); Gemma-2-27B started with
# 2.32, Gemma-3-27B with 2.40, Llama-3.1-8B with 2.61. A failure needs a large sampler pass
# (max_num_seqs × vocabulary × 4 B, one fp32 copy of the logits: 786 MiB in that OOM); a thin
# headroom with a small one is a risk, not a failure.
WARMUP_RESERVE_BYTES = round(2.25 * GIB)
WARMUP_RISK_BYTES = round(2.75 * GIB)  # within 0.5 GiB of the failures, with a sampler of half their size
WARMUP_LARGE_SAMPLER_BYTES = GIB // 2
WARMUP_TINY_HEADROOM_BYTES = GIB  # below this any warm-up is at risk
V0_CUDA_GRAPH_BYTES = GIB // 2  # V0's graphs after the KV cache: "Graph capturing finished in 5 secs, took 0.47 GiB"
KV_MARGIN_FRACTION = 0.05  # the validation table's worst modelled KV error: within it, a fit is "at risk"


def sampler_block_bytes(shape: ModelShape, max_num_seqs: int) -> int:
    """One fp32 [max_num_seqs × vocabulary] tensor: the sampler warm-up's largest single allocation."""
    return max_num_seqs * (shape.vocab_size or 0) * 4
