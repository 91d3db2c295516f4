"""The planner's results as typed, frozen records: what `deployment.plan_setup` returns and the
page, the frames and `kvviz plan` read by attribute.

`kvviz plan --json` is `dataclasses.asdict` of these, with the JSON's long-standing shape kept:
a what-if that was not asked for (`prefix`, `offload`) is left out rather than null, and a
context row's bandwidth bounds sit beside its other figures (left out when the GPU's bandwidth
is unknown). Standard library only.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar

from kvviz.planner.vllm_memory import VllmBudget


@dataclass(frozen=True, kw_only=True)
class Weights:
    """The weights of the whole model and one GPU's share."""

    params_total: int | None  # None: transformers cannot build the architecture and none was given
    params_active: int | None  # read per token (MoE: k of E routed experts)
    params_known: bool
    params_source: str  # "meta-device count", "given", …
    weight_dtype: str  # the format in words: "bf16", "mxfp4 experts + bf16", …
    bytes_total: int
    bytes_active: int  # read per decode step
    bytes_per_gpu: int  # the heaviest GPU's (pipeline stages differ: embedding first, LM head last)
    moe: bool = False  # routed experts (the config names E and k); else dense
    checkpoint_bytes: int | None = None  # as the checkpoint stores them (bytes_total: as vLLM holds them)


@dataclass(frozen=True, kw_only=True)
class PerGpu:
    """One GPU's memory: what is left for KV caches after the weights and the overhead."""

    memory_bytes: int
    overhead_bytes: int
    weight_bytes: int
    kv_budget_bytes: int
    kv_bytes_per_token: int  # the largest stage's, one TP rank's share
    layers: int  # the largest stage's


@dataclass(frozen=True)
class Plain:
    """Requests of `context_tokens` tokens that fit, in plain bytes."""

    context_tokens: int
    kv_bytes_per_request_per_gpu: int
    requests_per_replica: int
    requests_total: int


@dataclass(frozen=True, kw_only=True)
class VllmPlan:
    """vLLM's allocation on one GPU, as its start-up log reports it."""

    error: ClassVar[None] = None  # as VllmUnavailable: `if plan.vllm.error` reads the same on both
    starts: bool  # False: vLLM would not start (any failure in SetupPlan.start, or too few blocks)
    longest_max_model_len: int  # the longest that fits (= max_model_len when it starts)
    platform: str  # "CUDA" / "CPU"
    prefix_caching: bool
    gpu_memory_utilization: float
    block_size: int
    max_model_len: int
    max_num_batched_tokens: int
    in_flight_tokens: int
    num_blocks: int
    num_tokens: int
    max_concurrency: float
    blocks_per_request: int
    page_bytes: int
    num_groups: int
    group_size: int
    layout: str  # "uniform", "uniform type", "hybrid"
    requests_at_context_per_replica: int
    requests_at_context_total: int
    fits_max_model_len: bool = True  # one request of max_model_len fits in the blocks (vLLM's block check)
    hit_block: int = 0  # tokens a prefix-cache hit comes in (lcm of the groups' block sizes); 0: unknown
    group_block_sizes: tuple[int, ...] = ()  # each KV cache group's block size, where there are several
    # the longest max_model_len kvviz suggests: one that fits with kvviz's margin for its modelled
    # budget to spare (vllm_memory.KV_MARGIN_FRACTION; the smallest rank's, on every stage); 0: none
    suggested_max_model_len: int = 0


@dataclass(frozen=True)
class StartCheck:
    """One reason vLLM would not start (a failure) or might not (a risk), with the bytes that decide
    it: `needed` against `available` (a risk's margin is available − needed)."""

    kind: str  # one of START_CHECKS
    needed_bytes: int = 0
    available_bytes: int = 0
    count: int = 0  # kind-specific: max_num_seqs (warm-up), block size (block_size), tokens (kv_too_small)


# Failures vLLM hits at start-up, in the order it hits them, and risks on a thin margin.
START_CHECKS = ("weights_load", "free_memory", "kv_given_too_large", "no_kv_memory", "kv_too_small",
                "block_size", "warmup", "warmup_margin", "kv_margin", "kv_given_margin")


@dataclass(frozen=True)
class StartVerdict:
    """Will vLLM start? Failures it would hit, and risks where kvviz's margin is thin."""

    failures: tuple[StartCheck, ...] = ()
    risks: tuple[StartCheck, ...] = ()

    @property
    def starts(self) -> bool:
        return not self.failures

    @property
    def word(self) -> str:
        """"refused", "at risk" or "starts"."""
        return "refused" if self.failures else "at risk" if self.risks else "starts"


@dataclass(frozen=True)
class VllmUnavailable:
    """vLLM cannot serve this setting (e.g. an int4 KV cache): why, in words."""

    error: str


@dataclass(frozen=True)
class PrefixWhatIf:
    """Requests sharing one system prompt, stored once in whole blocks (modelled)."""

    prefix_tokens: int
    shared_tokens: int
    requests_per_replica: int
    requests_total: int
    hit_block: int  # the whole blocks it is shared in: vLLM's prefix-hit granularity


@dataclass(frozen=True, kw_only=True)
class OffloadWhatIf:
    """Requests whose caches a CPU tier keeps (modelled)."""

    offload_bytes: int
    requests_kept_per_replica: int
    requests_kept_total: int
    requests_decoding_per_replica: int
    swap_in_s_per_request: float
    pcie_bytes_per_s: float


@dataclass(frozen=True)
class Bandwidth:
    """Decode-step floor and token-rate ceilings at the GPU's peak bandwidth."""

    decode_step_floor_s: float
    tokens_per_s_per_request_ceiling: float
    tokens_per_s_aggregate_ceiling: float
    decode_step_floor_s_at_max: float | None  # with every request that fits; None when none fits
    tokens_per_s_aggregate_ceiling_at_max: float


@dataclass(frozen=True, kw_only=True)
class SetupPlan:
    """One serving setup, planned: `deployment.plan_setup`."""

    label: str  # "8×H200, TP 8"
    tp: int
    pp: int
    dp: int
    gpus: int
    weights: Weights
    per_gpu: PerGpu
    plain: Plain
    vllm: VllmPlan | VllmUnavailable
    bandwidth: Bandwidth | None  # None without a bandwidth
    prefix: PrefixWhatIf | None = None  # only when a shared prompt was asked about
    offload: OffloadWhatIf | None = None  # only when a CPU tier was asked about
    vllm_budget: VllmBudget | None = None  # vLLM's own budget, when its flags were given
    start: StartVerdict = StartVerdict()  # will it start (kvviz.planner.deployment.start_checks)


@dataclass(frozen=True, kw_only=True)
class ContextRow:
    """One line of the requests-vs-context table."""

    context_tokens: int
    kv_bytes_per_request: int
    batch: int
    kv_bytes_for_batch: int
    max_concurrent_requests: int
    requests_total: int
    vllm_requests_per_replica: int | None  # None when vLLM cannot serve the setting
    vllm_requests_total: int | None
    bandwidth: Bandwidth | None


@dataclass(frozen=True)
class FitChange:
    """The smallest change that lets vLLM start: a larger TP (with its GPU count) or a weight format,
    with fewer sequences where the sampler's warm-up needs them."""

    tp: int | None = None
    gpus: int | None = None
    weight_dtype: str | None = None
    max_num_seqs: int | None = None  # with it: the TP or format starts only with fewer sequences


_LEFT_OUT_WHEN_NONE = ("prefix", "offload", "vllm_budget")


def plan_json(plan: SetupPlan) -> dict:
    """The plan as JSON-ready data, keys as `kvviz plan --json` has always given them."""
    out = asdict(plan)
    for key in _LEFT_OUT_WHEN_NONE:
        if out[key] is None:
            del out[key]
    return out


def row_json(row: ContextRow) -> dict:
    """A context row as JSON-ready data: its bandwidth bounds flattened beside the rest."""
    out = {f.name: getattr(row, f.name) for f in fields(row) if f.name != "bandwidth"}
    return {**out, **(asdict(row.bandwidth) if row.bandwidth else {})}
