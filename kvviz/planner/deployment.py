"""One serving setup, planned: a model on N GPUs (TP / PP / DP), as plain bytes and as vLLM
would allocate it, with the prefix-sharing and CPU-offload what-ifs. `kvviz plan` prints it,
the Capacity planner page shows it; both read the same typed result from `plan_setup`
(kvviz.planner.results; `results.plan_json` for JSON) and word it with kvviz.planner.words.
Settings are checked once, here (`validated_setup`), in the caller's vocabulary: the page's
words or the CLI's flags.

Arithmetic: kvviz.planner.capacity (bytes), kvviz.planner.parallel (splits), kvviz.planner.serving_plan (vLLM blocks).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from kvviz.planner import capacity, checkpoint_weights, parallel, serving_plan, vllm_memory, vllm_versions, words
from kvviz.planner.capacity import ModelKV
from kvviz.planner.results import (
    Bandwidth, ContextRow, FitChange, OffloadWhatIf, PerGpu, Plain, PrefixWhatIf, SetupPlan, StartCheck,
    StartVerdict, VllmPlan, VllmUnavailable, Weights)
from kvviz.core.errors import UserError

CHECKPOINT = "checkpoint"  # weight_dtype: as the checkpoint stores them (quantization_config)
PCIE_BYTES_PER_S = 64e9  # assumed host link for the offload what-if: PCIe 5.0 x16, one way


@dataclass(frozen=True, kw_only=True)
class Setup:
    """Everything about the deployment except the model."""

    gpu_name: str = "H100 SXM"  # label
    gpu_bytes: int = 80 * 10**9  # memory of one GPU (GB = 1e9 B)
    bandwidth_bytes_per_s: float | None = None  # peak memory bandwidth of one GPU
    par: parallel.Parallel = field(default_factory=parallel.Parallel)
    kv_dtype: str = "bf16"
    weight_dtype: str = CHECKPOINT  # or a dtype for every parameter (an override)
    overhead_fraction: float = capacity.DEFAULT_OVERHEAD_FRACTION  # = 1 − gpu_memory_utilization
    context_tokens: int = 2000  # tokens per request, T
    batch: int = 1  # requests decoded together (bandwidth bounds)
    block_size: int = serving_plan.DEFAULT_BLOCK_SIZE
    max_model_len: int | None = None  # None: the model's max position (else the context)
    max_num_batched_tokens: int | None = None  # None: vLLM's default for this GPU and release
    prefix_tokens: int = 0  # system prompt shared by every request (what-if)
    offload_bytes: int = 0  # CPU memory per replica holding evicted blocks (what-if)
    platform: str = "cuda"  # vLLM's platform: "cuda" or "cpu" (hybrids' block sizes, state dtype)
    prefix_caching: bool = True  # vLLM's default; a Mamba hybrid then holds more state pages
    # vLLM's own flags: either sets the budget as vLLM does (kvviz.planner.vllm_memory) instead of
    # the overhead fraction; kv_cache_memory_bytes (per GPU) overrides it, as in vLLM
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    max_num_seqs: int | None = None  # None: vLLM's default for this GPU and release (vllm_versions)
    vllm_version: str | None = None  # the release planned for (vllm_versions); None: the latest modelled
    vllm_engine: str | None = None  # "V0" for a 0.8-0.10 release run with VLLM_USE_V1=0 (a log says so)
    gpu_arch: str | None = "hopper"  # the default GPU's; how vLLM lays out MXFP4 experts (gpus.json); None: unknown
    gpu_p2p: bool = True  # peer-to-peer links between the GPUs (NVLink / SXM): NCCL's buffers under TP
    enforce_eager: bool = False  # vLLM's --enforce-eager: no CUDA graphs

    @property
    def vllm_flags(self) -> bool:
        """Whether the budget is vLLM's (its flags given) rather than the overhead fraction's."""
        return self.gpu_memory_utilization is not None or bool(self.kv_cache_memory_bytes)


# What each setting is called in messages: the page's words by default; the CLI passes its flags.
SETTING_NAMES = {
    "context_tokens": "context", "batch": "batch", "block_size": "block size",
    "max_num_batched_tokens": "max batched tokens", "max_model_len": "max model length",
    "overhead_fraction": "the overhead", "prefix_tokens": "the shared prefix",
    "offload_bytes": "the CPU offload tier", "tp": "TP", "pp": "PP", "dp": "DP",
    "gpu_memory_utilization": "gpu_memory_utilization", "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "max_num_seqs": "max_num_seqs", "vllm_version": "the vLLM version",
}


def validated_setup(model: ModelKV, s: Setup, names: Mapping[str, str] = SETTING_NAMES) -> Setup:
    """The setup with its dtypes normalized ('bfloat16' → 'bf16'); UserError, naming the setting
    as `names` does, for settings that cannot be planned. The one place settings are checked."""
    def name(key: str) -> str:
        return names.get(key, SETTING_NAMES[key])

    for key, value in (("context_tokens", s.context_tokens), ("batch", s.batch),
                       ("block_size", s.block_size), ("max_num_batched_tokens", s.max_num_batched_tokens or 1),
                       ("tp", s.par.tp), ("pp", s.par.pp), ("dp", s.par.dp)):
        if value < 1:
            raise UserError(f"{name(key)} must be at least 1")
    if not 0 <= s.overhead_fraction < 1:
        raise UserError(f"{name('overhead_fraction')} is a fraction of GPU memory, in [0, 1)")
    if s.prefix_tokens < 0 or s.prefix_tokens >= s.context_tokens:
        raise UserError(f"{name('prefix_tokens')} must be shorter than the context (0 for none)")
    if s.max_model_len is not None and s.max_model_len < 1:
        raise UserError(f"{name('max_model_len')} must be at least 1")
    if s.offload_bytes < 0:
        raise UserError(f"{name('offload_bytes')} cannot be negative")
    if s.gpu_memory_utilization is not None and not 0 < s.gpu_memory_utilization <= 1:
        raise UserError(f"{name('gpu_memory_utilization')} is a fraction of GPU memory, in (0, 1]")
    if s.kv_cache_memory_bytes is not None and s.kv_cache_memory_bytes < 0:
        raise UserError(f"{name('kv_cache_memory_bytes')} cannot be negative")
    if s.max_num_seqs is not None and s.max_num_seqs < 1:
        raise UserError(f"{name('max_num_seqs')} must be at least 1")
    if s.platform not in serving_plan.PLATFORMS:
        raise UserError(f"the platform is one of {', '.join(serving_plan.PLATFORMS)}")
    if s.vllm_version is not None:
        try:
            vllm_versions.parse_version(s.vllm_version)
        except UserError as err:
            raise UserError(f"{name('vllm_version')}: {err}") from None
    parallel.check_parallel(s.par, model.specs, model.num_attention_heads)
    weight_dtype = s.weight_dtype if s.weight_dtype == CHECKPOINT else capacity.normalize_dtype(s.weight_dtype)
    return replace(s, kv_dtype=capacity.normalize_dtype(s.kv_dtype), weight_dtype=weight_dtype)


def stage_models(model: ModelKV, par: parallel.Parallel) -> list[ModelKV]:
    """What one GPU of each pipeline stage caches (its layers, its share of the heads)."""
    return [replace(model, specs=specs) for specs in parallel.stage_rank_specs(model.specs, par)]


def max_model_len(model: ModelKV, s: Setup) -> int:
    return s.max_model_len or model.max_position or s.context_tokens


def weight_format(model: ModelKV, weight_dtype: str) -> str:
    """The weights' format: the checkpoint's own (when known) or the override's dtype."""
    if weight_dtype == CHECKPOINT:
        return model.weight_format if model.checkpoint_bytes is not None else "bf16"
    return capacity.normalize_dtype(weight_dtype)


def weight_parts(model: ModelKV, s: Setup) -> checkpoint_weights.WeightParts | None:
    """The model's weights by part as vLLM holds them on this GPU (None without a config kvviz can
    build, e.g. explicit numbers or an unknown architecture with a given parameter count)."""
    if not model.config_json or not model.params_source.startswith("meta-device count"):
        return None
    override = None if s.weight_dtype == CHECKPOINT else s.weight_dtype
    kernel = checkpoint_weights.mxfp4_kernel(s.gpu_arch,
                                             vllm_versions.parse_version(s.vllm_version or vllm_versions.LATEST))
    return checkpoint_weights.cached_weight_parts(model.config_json, override, kernel)


def stage_weight_bytes(model: ModelKV, s: Setup, total: int) -> list[int]:
    """One GPU's weights in each pipeline stage: the stage's layers, the embedding (and a vision
    tower) on the first, the LM head on the last, each split over the TP ranks; evenly when kvviz
    has no parts (modelled)."""
    parts = weight_parts(model, s)
    if parts is None or len(parts.layers) != model.num_layers:
        return [parallel.weight_bytes_per_gpu(total, s.par)] * s.par.pp
    counts = parallel.pp_layer_counts(model.num_layers, s.par.pp)
    return [-(-b // s.par.tp) for b in parts.stage_bytes(counts)]


def _weights(model: ModelKV, s: Setup) -> Weights:
    parts = weight_parts(model, s)
    if parts is not None:
        total = parts.total
        share = (model.checkpoint_active_bytes or 0) / model.checkpoint_bytes if (
            s.weight_dtype == CHECKPOINT and model.checkpoint_bytes) else (
            (model.read_params or 0) / (model.weight_params or 1))
        read = round(total * share)
        label = parts.label
    elif s.weight_dtype == CHECKPOINT and model.checkpoint_bytes is not None:
        total, read, label = model.checkpoint_bytes, model.checkpoint_active_bytes, model.weight_format
    else:
        dtype = "bf16" if s.weight_dtype == CHECKPOINT else s.weight_dtype
        total = capacity.weight_bytes(model.weight_params or 0, dtype)
        read = capacity.weight_bytes(model.read_params or 0, dtype)
        label = weight_format(model, s.weight_dtype)
    return Weights(params_total=model.params_total, params_active=model.params_active,
                   params_known=model.params_total is not None,
                   params_source=model.params_source, weight_dtype=label, bytes_total=total, bytes_active=read,
                   bytes_per_gpu=max(stage_weight_bytes(model, s, total)), moe=model.moe,
                   checkpoint_bytes=model.checkpoint_bytes)


def _plain(stages: list[ModelKV], budgets: list[int], s: Setup, tokens: int) -> Plain:
    """Requests of `tokens` that fit in plain bytes: the stage that fits the fewest bounds them."""
    per_stage = [capacity.kv_bytes_for_context(m, tokens, s.kv_dtype) for m in stages]
    if max(per_stage) == 0:
        raise UserError("this model keeps no past token for a request (every layer's window is 1 "
                         "token), so there is no KV cache to plan")
    per_replica = min(b // r for b, r in zip(budgets, per_stage) if r) if any(per_stage) else 0
    return Plain(tokens, max(per_stage), per_replica, per_replica * s.par.dp)


def _vllm(stages: list[ModelKV], budgets: list[int], model: ModelKV, s: Setup) -> VllmPlan | VllmUnavailable:
    """vLLM's allocation: each stage sizes its blocks from its own budget, and every worker keeps
    the smallest stage's count (v1/core/kv_cache_utils.py get_kv_cache_configs)."""
    try:
        platform = serving_plan.PLATFORMS[s.platform]
        if serving_plan.cpu_mla_override(model.specs, platform):  # as vLLM's CPU platform forces it
            s = replace(s, block_size=serving_plan.CPU_MLA_BLOCK, prefix_caching=False)
        pages = [serving_plan.page_specs(m.specs, capacity.normalize_dtype(s.kv_dtype), s.block_size,
                                         platform, s.prefix_caching) for m in stages]
        length = max_model_len(model, s)
        batched = max_num_batched_tokens(model, s)
        in_flight = serving_plan.in_flight_tokens(platform, batched, s.par.pp)
        allocs = [serving_plan.allocate(p, b, length, in_flight) for p, b in zip(pages, budgets)]
        at_t = min(serving_plan.requests_at(p, b, s.context_tokens, in_flight) for p, b in zip(pages, budgets))
    except serving_plan.NotServable as err:
        return VllmUnavailable(str(err))
    a = serving_plan.min_over_stages(allocs)
    null_block = not release(s).v0
    fits = serving_plan.starts(a, null_block)  # vLLM refuses to start otherwise
    longest = length if fits else min(serving_plan.longest_model_len(
        p, b, length, in_flight, null_block) for p, b in zip(pages, budgets))
    # where the budget is vLLM's (modelled), a suggestion keeps kvviz's margin on every stage
    keep = 1 - vllm_memory.KV_MARGIN_FRACTION if s.vllm_flags else 1
    suggested = length if fits else min(serving_plan.longest_model_len(
        p, int(b * keep), length, in_flight, null_block) for p, b in zip(pages, budgets))
    return VllmPlan(
        starts=fits, fits_max_model_len=fits, longest_max_model_len=longest, platform=platform.name,
        prefix_caching=s.prefix_caching, gpu_memory_utilization=utilization(s),
        block_size=a.block_size, max_model_len=length, max_num_batched_tokens=batched,
        in_flight_tokens=in_flight, num_blocks=a.num_blocks, num_tokens=a.num_tokens,
        max_concurrency=a.max_concurrency, blocks_per_request=a.blocks_per_request,
        page_bytes=a.page_bytes, num_groups=a.num_groups, group_size=a.group_size, layout=a.layout,
        requests_at_context_per_replica=at_t, requests_at_context_total=at_t * s.par.dp,
        suggested_max_model_len=min(suggested, longest), hit_block=a.hit_block,
        group_block_sizes=a.group_block_sizes)


def _prefix(stages: list[ModelKV], budgets: list[int], s: Setup, hit_block: int) -> PrefixWhatIf:
    """Requests sharing an S-token system prompt, only whole blocks of `hit_block` tokens shared
    (vLLM's hit granularity: on a hybrid, the lcm of its groups' block sizes) (modelled)."""
    shared_tokens = s.prefix_tokens // hit_block * hit_block
    fits = []
    for m, budget in zip(stages, budgets):
        per_request = capacity.kv_bytes_for_context(m, s.context_tokens, s.kv_dtype)
        shared = capacity.shareable_prefix_bytes(m, shared_tokens, s.kv_dtype)
        fits.append(capacity.requests_with_shared_prefix(budget, per_request, shared))
    return PrefixWhatIf(s.prefix_tokens, shared_tokens, min(fits), min(fits) * s.par.dp, hit_block)


def _offload(plain: Plain, budget: int, s: Setup) -> OffloadWhatIf:
    """Requests whose caches can be kept when a CPU tier holds evicted blocks (modelled)."""
    per_request = plain.kv_bytes_per_request_per_gpu
    cpu_per_gpu = s.offload_bytes // s.par.gpus_per_replica
    kept = (budget + cpu_per_gpu) // per_request
    return OffloadWhatIf(offload_bytes=s.offload_bytes, requests_kept_per_replica=kept,
                         requests_kept_total=kept * s.par.dp,
                         requests_decoding_per_replica=plain.requests_per_replica,
                         swap_in_s_per_request=per_request * s.par.gpus_per_replica / PCIE_BYTES_PER_S,
                         pcie_bytes_per_s=PCIE_BYTES_PER_S)


def _bandwidth(stages: list[ModelKV], weights: Weights, plain: Plain, s: Setup) -> Bandwidth | None:
    """Decode-step floor: each stage reads its share of the active weights and its requests'
    caches at the GPU's peak bandwidth; stages run one after the other for a token."""
    if not s.bandwidth_bytes_per_s:
        return None
    read_per_stage = weights.bytes_active / s.par.gpus_per_replica

    def step_s(requests: int) -> float:
        return sum(capacity.decode_step_floor_s(
            read_per_stage, capacity.kv_bytes_for_context(m, s.context_tokens, s.kv_dtype) * requests,
            s.bandwidth_bytes_per_s) for m in stages)

    batch_s, fit = step_s(s.batch), plain.requests_per_replica
    full_s = step_s(fit) if fit else None
    return Bandwidth(batch_s, capacity.tokens_per_s_ceiling_per_request(batch_s),
                     capacity.tokens_per_s_ceiling_aggregate(batch_s, s.batch), full_s,
                     capacity.tokens_per_s_ceiling_aggregate(full_s, fit) if full_s else 0.0)


def release(s: Setup) -> vllm_versions.Release:
    """The vLLM release family the setup is planned for."""
    return vllm_versions.release_for(s.vllm_version, s.vllm_engine)


def utilization(s: Setup) -> float:
    """gpu_memory_utilization as given; with vLLM's other flags, its release's default; else
    1 − the overhead fraction (kvviz's simple budget)."""
    if s.gpu_memory_utilization is not None:
        return s.gpu_memory_utilization
    if s.kv_cache_memory_bytes:
        return release(s).default_gpu_memory_utilization
    return round(1 - s.overhead_fraction, 6)


def _limits(s: Setup) -> tuple[int, int | None]:
    return vllm_versions.default_limits(release(s), s.vllm_version, s.gpu_bytes, s.gpu_name, s.platform)


def max_num_seqs(s: Setup) -> int:
    """--max-num-seqs as given, else vLLM's default for this GPU and release."""
    return s.max_num_seqs or _limits(s)[0]


def max_num_batched_tokens(model: ModelKV, s: Setup) -> int:
    """--max-num-batched-tokens as given, else vLLM's default: V1's for this GPU, V0's from
    max_model_len (the profile run's size, and the tokens a batch schedules)."""
    if s.max_num_batched_tokens:
        return s.max_num_batched_tokens
    tokens = _limits(s)[1]
    return tokens or vllm_versions.v0_profile_tokens(release(s), max_model_len(model, s), None)


def vllm_budget(model: ModelKV, s: Setup, weights: Weights) -> vllm_memory.VllmBudget | None:
    """vLLM's own budget per GPU when its flags were given (every term modelled), else None."""
    if not s.vllm_flags:
        return None
    rel = release(s)
    util = s.gpu_memory_utilization or rel.default_gpu_memory_utilization
    inputs = vllm_memory.BudgetInputs(
        release=rel, vllm_version=s.vllm_version or vllm_versions.LATEST, total_bytes=s.gpu_bytes,
        gpu_memory_utilization=util,
        stage_weight_bytes=tuple(stage_weight_bytes(model, s, weights.bytes_total)),
        profile_tokens=max_num_batched_tokens(model, s), max_num_seqs=max_num_seqs(s), tp=s.par.tp,
        pp=s.par.pp, p2p=s.gpu_p2p, enforce_eager=s.enforce_eager,
        kv_cache_memory_bytes=s.kv_cache_memory_bytes)
    return vllm_memory.vllm_budget(model.shape, inputs)


def stage_budgets(model: ModelKV, s: Setup, weights: Weights,
                  by_vllm: vllm_memory.VllmBudget | None) -> list[int]:
    """The KV budget of one GPU in each pipeline stage (never below 0)."""
    if by_vllm is None:
        overhead = capacity.runtime_overhead_bytes(s.gpu_bytes, s.overhead_fraction)
        return [max(0, s.gpu_bytes - w - overhead) for w in stage_weight_bytes(model, s, weights.bytes_total)]
    if by_vllm.given:
        return [by_vllm.kv_bytes] * len(by_vllm.stages)
    return [max(0, st.kv_bytes) for st in by_vllm.stages]


def _memory_failures(model: ModelKV, s: Setup, plan: SetupPlan) -> list[StartCheck]:
    """What vLLM hits before serving, in its order: the weights do not load; the requested memory
    is not free at start (V1); a given KV cache does not fit; no memory for the cache; too few
    blocks for one request of max_model_len."""
    total, context = s.gpu_bytes, vllm_memory.CUDA_CONTEXT_BYTES
    weights, b, v = plan.weights.bytes_per_gpu, plan.vllm_budget, plan.vllm
    if weights + context > total:  # CUDA out of memory while loading, before any KV message
        return [StartCheck("weights_load", weights + context, total)]
    out = []
    requested = math.ceil(total * utilization(s))
    if s.platform == "cuda" and not release(s).v0 and not s.kv_cache_memory_bytes and requested > total - context:
        out.append(StartCheck("free_memory", requested, total - context))
    if b is not None and b.given:
        if weights + b.kv_bytes + context > total:
            out.append(StartCheck("kv_given_too_large", weights + b.kv_bytes, total - context))
    elif plan.per_gpu.kv_budget_bytes <= 0:
        out.append(StartCheck("no_kv_memory", 0, b.kv_bytes_signed if b else 0))
    if not out and not v.fits_max_model_len:
        needed = v.blocks_per_request * v.page_bytes * max(1, v.group_size)
        out.append(StartCheck("kv_too_small", needed, plan.per_gpu.kv_budget_bytes, v.longest_max_model_len))
    return out


def _block_failure(model: ModelKV, s: Setup, v: VllmPlan) -> list[StartCheck]:
    """vLLM's CPU attention backend takes blocks in multiples of 32 (an MLA model has its own)."""
    kernel = serving_plan.CPU.kernel_block
    if s.platform != "cpu" or model.attention_kind == "MLA" or v.block_size % kernel == 0:
        return []
    return [StartCheck("block_size", count=v.block_size)]


def _warmup_checks(model: ModelKV, s: Setup, plan: SetupPlan) -> tuple[list[StartCheck], list[StartCheck]]:
    """After the KV allocation: V1's CUDA graphs and sampler warm-up in the headroom outside the
    budget (vllm_memory.WARMUP_*), V0's CUDA graphs; failures and risks."""
    b = plan.vllm_budget
    if b is None or b.given:
        return [], []
    if release(s).v0:
        head = b.total_bytes - b.requested_bytes - vllm_memory.CUDA_CONTEXT_BYTES
        thin = not s.enforce_eager and head < vllm_memory.V0_CUDA_GRAPH_BYTES
        return [], [StartCheck("warmup_margin", vllm_memory.V0_CUDA_GRAPH_BYTES, head)] if thin else []
    seqs = b.max_num_seqs
    head, large = b.headroom_bytes, vllm_memory.sampler_block_bytes(model.shape, seqs)
    if head < vllm_memory.WARMUP_RESERVE_BYTES and large >= vllm_memory.WARMUP_LARGE_SAMPLER_BYTES:
        return [StartCheck("warmup", vllm_memory.WARMUP_RESERVE_BYTES, head, seqs)], []
    medium = large >= vllm_memory.WARMUP_LARGE_SAMPLER_BYTES // 2
    if (medium and head < vllm_memory.WARMUP_RISK_BYTES) or head < vllm_memory.WARMUP_TINY_HEADROOM_BYTES:
        return [], [StartCheck("warmup_margin", vllm_memory.WARMUP_RISK_BYTES, head, seqs)]
    return [], []


def _kv_risks(plan: SetupPlan) -> list[StartCheck]:
    """A fit within kvviz's modelled error on the budget, or a given KV cache that leaves less than
    the profile run's peak (vLLM does not check it: PR #56698)."""
    b, v = plan.vllm_budget, plan.vllm
    if b is None:
        return []
    if b.given:
        free = b.total_bytes - vllm_memory.CUDA_CONTEXT_BYTES - b.weight_bytes - b.kv_bytes
        transient = b.activation_peak_bytes + b.non_torch_bytes + b.cuda_graph_bytes
        return [StartCheck("kv_given_margin", transient, free)] if free < transient else []
    needed = v.blocks_per_request * v.page_bytes * max(1, v.group_size)
    available = plan.per_gpu.kv_budget_bytes
    thin = available - needed < vllm_memory.KV_MARGIN_FRACTION * available
    return [StartCheck("kv_margin", needed, available)] if thin else []


def start_checks(model: ModelKV, s: Setup, plan: SetupPlan) -> StartVerdict:
    """Will vLLM start with this plan: every failure kvviz foresees, and the risks."""
    if not plan.weights.params_known or not isinstance(plan.vllm, VllmPlan):
        return StartVerdict()
    failures = _memory_failures(model, s, plan) + _block_failure(model, s, plan.vllm)
    if failures:
        return StartVerdict(tuple(failures))
    warm_failures, warm_risks = _warmup_checks(model, s, plan)
    return StartVerdict(tuple(warm_failures), tuple(warm_risks + ([] if warm_failures else _kv_risks(plan))))


def plan_setup(model: ModelKV, s: Setup, names: Mapping[str, str] = SETTING_NAMES) -> SetupPlan:
    """The whole plan; UserError (naming settings as `names` does) for settings that cannot be planned."""
    s = validated_setup(model, s, names)
    stages = stage_models(model, s.par)
    weights = _weights(model, s)
    by_vllm = vllm_budget(model, s, weights)
    budgets = stage_budgets(model, s, weights, by_vllm)
    budget = min(budgets)
    if by_vllm is None:
        overhead = capacity.runtime_overhead_bytes(s.gpu_bytes, s.overhead_fraction)
    else:
        overhead = max(0, by_vllm.deducted_bytes)
    plain = _plain(stages, budgets, s, s.context_tokens)
    per_gpu = PerGpu(memory_bytes=s.gpu_bytes, overhead_bytes=overhead,
                     weight_bytes=weights.bytes_per_gpu, kv_budget_bytes=budget,
                     kv_bytes_per_token=max(capacity.kv_bytes_per_token(m, s.kv_dtype) for m in stages),
                     layers=max(m.num_layers for m in stages))
    vllm = _vllm(stages, budgets, model, s)
    hit_block = vllm.hit_block if isinstance(vllm, VllmPlan) and vllm.hit_block else s.block_size
    plan = SetupPlan(label=s.par.label(s.gpu_name), tp=s.par.tp, pp=s.par.pp, dp=s.par.dp, gpus=s.par.gpus,
                     weights=weights, per_gpu=per_gpu, plain=plain, vllm=vllm,
                     bandwidth=_bandwidth(stages, weights, plain, s),
                     prefix=_prefix(stages, budgets, s, hit_block) if s.prefix_tokens else None,
                     offload=_offload(plain, budget, s) if s.offload_bytes else None, vllm_budget=by_vllm)
    verdict = start_checks(model, s, plan)
    vllm = plan.vllm
    if isinstance(vllm, VllmPlan) and vllm.starts != verdict.starts:
        vllm = replace(vllm, starts=verdict.starts)  # never "starts" beside a failure
    return replace(plan, vllm=vllm, start=verdict)


def context_row(plan: SetupPlan, batch: int) -> ContextRow:
    """One table row from a plan: KV per request per GPU, requests per replica (plain and in whole
    vLLM blocks) and in all, and the bandwidth bounds when known."""
    plain, vllm = plan.plain, plan.vllm
    return ContextRow(context_tokens=plain.context_tokens, kv_bytes_per_request=plain.kv_bytes_per_request_per_gpu,
                      batch=batch, kv_bytes_for_batch=plain.kv_bytes_per_request_per_gpu * batch,
                      max_concurrent_requests=plain.requests_per_replica, requests_total=plain.requests_total,
                      vllm_requests_per_replica=getattr(vllm, "requests_at_context_per_replica", None),
                      vllm_requests_total=getattr(vllm, "requests_at_context_total", None), bandwidth=plan.bandwidth)


def context_rows(model: ModelKV, s: Setup, contexts, names: Mapping[str, str] = SETTING_NAMES) -> list[ContextRow]:
    """context_row at each context T (no prefix / offload what-ifs)."""
    return [context_row(plan_setup(model, replace(s, context_tokens=t, prefix_tokens=0, offload_bytes=0),
                                   names), s.batch) for t in contexts]


# ---------------------------------------------------------------- when nothing fits

_TP_TRIES = (1, 2, 4, 8, 16, 32, 64)
_WEIGHT_TRIES = ("fp8", "int4")


def refused(plan: SetupPlan) -> bool:
    """vLLM can serve the setting but would not start (any failure in plan.start)."""
    return isinstance(plan.vllm, VllmPlan) and not plan.vllm.starts


def blocks_refused(plan: SetupPlan) -> bool:
    """vLLM's first failure is too few blocks for one request of max_model_len."""
    return bool(plan.start.failures) and plan.start.failures[0].kind == "kv_too_small"


def _starts(model: ModelKV, s: Setup) -> bool:
    try:
        plan = plan_setup(model, s)
    except UserError:
        return False
    return isinstance(plan.vllm, VllmPlan) and plan.vllm.starts


def _with_fewer_seqs(model: ModelKV, s: Setup) -> int | None:
    """None when `s` starts as it is; else the most sequences (halving vLLM's count) with which it
    starts, or 0 when the failure is not the warm-up's or fewer sequences do not cure it."""
    try:
        plan = plan_setup(model, s)
    except UserError:
        return 0
    if plan.start.starts:
        return None
    if plan.start.failures[0].kind != "warmup":
        return 0
    seqs = plan.vllm_budget.max_num_seqs if plan.vllm_budget else 256
    for n in (seqs // 2**k for k in range(1, 11)):
        if n >= 1 and _starts(model, replace(s, max_num_seqs=n)):
            return n
    return 0


def what_would_fit(model: ModelKV, s: Setup) -> FitChange | None:
    """The smallest change that lets one request of max_model_len start: a larger TP (same GPU,
    same PP / DP), else a smaller weight format at this TP, each re-planned under the same rules
    (every rank and stage; with fewer sequences where only the sampler's warm-up fails). None when
    the setup starts already or nothing tried does."""
    if _starts(model, s):
        return None
    for tp in (t for t in _TP_TRIES if t > s.par.tp):
        par = parallel.Parallel(tp, s.par.pp, s.par.dp)
        seqs = _with_fewer_seqs(model, replace(s, par=par))
        if seqs != 0:
            return FitChange(tp=tp, gpus=par.gpus, max_num_seqs=seqs)
    current = weight_format(model, s.weight_dtype)
    for dtype in _WEIGHT_TRIES:
        if dtype != current:
            seqs = _with_fewer_seqs(model, replace(s, weight_dtype=dtype))
            if seqs != 0:
                return FitChange(weight_dtype=dtype, max_num_seqs=seqs)
    return None


def first_that_starts(model: ModelKV, s: Setup, changes) -> dict | None:
    """The first change (a dict of Setup fields) that, re-planned under the same rules on every
    rank and stage, starts without a thin KV margin; None when none does."""
    for change in changes:
        try:
            plan = plan_setup(model, replace(s, **change))
        except UserError:
            continue
        if plan.start.starts and not any(r.kind == "kv_margin" for r in plan.start.risks):
            return change
    return None


def fit_advice(model: ModelKV, s: Setup) -> str:
    """words.fit_advice_sentence for this setup when vLLM would refuse to start; "" when it starts."""
    if _starts(model, s):
        return ""
    return words.fit_advice_sentence(what_would_fit(model, s), max_model_len(model, s),
                                     s.par.label(s.gpu_name), _TP_TRIES, _WEIGHT_TRIES)
