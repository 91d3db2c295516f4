"""Will it start? The start-up failures of vLLM the planner foresees, in vLLM's own words where it
has words for them, each with the smallest change that starts it; the risks where kvviz's margin is
thin; and the `vllm serve` line of the plan.

The checks themselves are kvviz.planner.deployment.start_checks' (a plan carries its verdict, so a
suggested change is re-planned under the same rules on every rank); this module words them:

* **the weights do not load** — one GPU's weights and the CUDA context exceed the device: torch
  runs out of memory while vLLM loads the weights, before any KV-cache message;
* **the requested memory is not free** (V1, `v1/worker/utils.request_memory`): "Free memory on
  device … on startup is less than desired GPU memory utilization …";
* **a given KV cache does not fit** (`--kv-cache-memory-bytes`): the weights and it exceed the
  device, so allocating the KV cache runs out of memory;
* **no memory for the cache** (`v1/core/kv_cache_utils._check_enough_kv_cache_memory`, V0's
  `raise_if_cache_size_invalid`): "No available memory for the cache blocks. …";
* **too little KV for one request** — V1: "To serve at least one request with the model's max seq
  len (L), (X GiB KV cache is needed, …"; V0: "The model's max seq len (L) is larger than the
  maximum number of tokens that can be stored in KV cache (N). …";
* **no common block size** (`v1/worker/utils.select_common_block_size`): the CPU attention backend
  takes multiples of 32;
* **the warm-up after the KV allocation** (V1's `_dummy_sampler_run`): "CUDA out of memory
  occurred when warming up sampler with N dummy requests. …", foreseen from the headroom the
  budget leaves (kvviz.planner.vllm_memory.WARMUP_*).

Not foreseen, and said so: a quantization or attention kernel the GPU lacks, an architecture vLLM
does not implement, memory other processes hold on the GPU.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from kvviz.planner import deployment, serving_plan, vllm_memory
from kvviz.planner.results import SetupPlan, StartCheck, VllmPlan

GIB = 2**30
CPU_KERNEL_BLOCK = serving_plan.CPU.kernel_block  # CPU_ATTN's MultipleOf(32), one figure for both
NOT_FORESEEN = ("a quantization or attention kernel the GPU lacks, an architecture vLLM does not "
                "implement, memory other processes hold on the GPU")
NO_MEMORY = ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
             "when initializing the engine.")


@dataclass(frozen=True)
class Refusal:
    """One start-up failure: what vLLM says (or, where it has no sentence of its own, what happens),
    and the smallest change that starts it."""

    message: str
    fix: str
    kind: str = ""  # results.START_CHECKS


@dataclass(frozen=True)
class Risk:
    """A thin margin: which term, by how much, in words."""

    kind: str
    margin_bytes: int
    sentence: str


def _format_gib(b: int) -> str:
    """vLLM's format_gib: GiB rounded to 2 decimals, Python's repr of the float."""
    return f"{round(b / GIB, 2)}"


def memory_message(needed: int, available: int, max_model_len: int, estimate: int) -> str:
    """vLLM's own sentence (kv_cache_utils._check_enough_kv_cache_memory), up to its advice."""
    estimated = (f"Based on the available memory, the estimated maximum model length is "
                 f"{estimate}. " if estimate > 0 else "")
    return (f"To serve at least one request with the model's max seq len ({max_model_len}), "
            f"({_format_gib(needed)} GiB KV cache is needed, which is larger than the available "
            f"KV cache memory ({_format_gib(available)} GiB). {estimated}").strip()


def v0_memory_message(max_model_len: int, tokens: int) -> str:
    """V0's sentence (worker.py raise_if_cache_size_invalid)."""
    return (f"The model's max seq len ({max_model_len}) is larger than the maximum number of tokens "
            f"that can be stored in KV cache ({tokens}). Try increasing `gpu_memory_utilization` or "
            "decreasing `max_model_len` when initializing the engine.")


def _gib(b: int) -> str:
    return f"{b / GIB:,.2f} GiB"


def _kv_too_small(plan: SetupPlan, setup: deployment.Setup, check: StartCheck, advice: str) -> Refusal:
    v = plan.vllm
    if deployment.release(setup).v0:
        message = v0_memory_message(v.max_model_len, v.num_blocks * v.block_size)
    else:
        message = memory_message(check.needed_bytes, check.available_bytes, v.max_model_len, check.count)
    safe = v.suggested_max_model_len
    if safe and safe < check.count:  # the longest that fits, less kvviz's margin for its modelled budget
        fix = (f"--max-model-len {safe} (the longest that fits is {check.count:,}; {safe:,} keeps "
               f"{vllm_memory.KV_MARGIN_FRACTION:.0%} of the KV budget to spare for kvviz's modelled terms "
               "and a weaker rank)")
    else:
        fix = f"--max-model-len {check.count}" if check.count else ""
    advice = advice[:1].lower() + advice[1:] if fix else advice  # "…; or it does not start on …"
    return Refusal(message, "; or ".join(p for p in (fix, advice) if p) or "a GPU with more memory", check.kind)


def _flags(change: dict) -> str:
    names = {"max_num_seqs": "--max-num-seqs", "gpu_memory_utilization": "--gpu-memory-utilization"}
    return " ".join(f"{names[k]} {v}" for k, v in change.items())


def _checked(model, setup: deployment.Setup, changes: list[dict], fallback: str, advice: str) -> str:
    """The first of `changes` that starts, re-planned under the same rules on every rank (kvviz's
    flags), or, without the model, `fallback` unchecked."""
    if model is None:
        return fallback
    change = deployment.first_that_starts(model, setup, changes)
    if change is not None:
        return f"{_flags(change)} (re-planned: it starts under the same rules, on every rank)"
    return f"no {fallback.split()[0]} alone starts it (re-planned); " + (advice or "a GPU with more memory")


def _warmup_fix(model, setup: deployment.Setup, check: StartCheck, advice: str) -> str:
    seqs = [check.count // 2**k for k in range(1, 11) if check.count // 2**k >= 1]
    util = deployment.utilization(setup)
    utils = [round(util - 0.01 * k, 2) for k in range(1, 16) if util - 0.01 * k > 0.05]
    return _checked(model, setup, [{"max_num_seqs": n} for n in seqs] + [{"gpu_memory_utilization": u} for u in utils],
                    f"--max-num-seqs {max(1, check.count // 4)}, or a lower --gpu-memory-utilization (the warm-up "
                    f"runs in the {_gib(check.available_bytes)} left outside the budget; the published failures "
                    f"had under {_gib(check.needed_bytes)})", advice)


def _refusal(plan: SetupPlan, setup: deployment.Setup, check: StartCheck, advice: str, model=None) -> Refusal:
    """One failure in vLLM's words (or what happens, where vLLM has no sentence), with its fix;
    given the model, every fix is re-planned before it is suggested."""
    more = advice or "more GPUs (a larger TP) or a smaller weight format"
    if check.kind == "kv_too_small":
        return _kv_too_small(plan, setup, check, advice)
    if check.kind == "weights_load":
        return Refusal(f"CUDA out of memory while loading the weights: {_gib(plan.weights.bytes_per_gpu)} of "
                       f"weights per GPU and the CUDA context ({_gib(check.needed_bytes - plan.weights.bytes_per_gpu)}) "
                       f"on a GPU of {_gib(check.available_bytes)}, before vLLM sizes any KV cache.",
                       more, check.kind)
    if check.kind == "free_memory":
        util = deployment.utilization(setup)
        return Refusal(f"Free memory on device ({_format_gib(check.available_bytes)}/{_format_gib(setup.gpu_bytes)} "
                       f"GiB) on startup is less than desired GPU memory utilization ({util}, "
                       f"{_format_gib(check.needed_bytes)} GiB). Decrease GPU memory utilization or reduce "
                       "GPU memory used by other processes.",
                       _free_memory_fix(model, setup, check, advice), check.kind)
    if check.kind == "kv_given_too_large":
        return Refusal(f"CUDA out of memory allocating the KV cache: {_gib(check.needed_bytes)} of weights and "
                       f"--kv-cache-memory-bytes on a GPU with {_gib(check.available_bytes)} free after the CUDA "
                       "context (vLLM does not check the figure it is given).",
                       f"--kv-cache-memory-bytes {max(0, check.available_bytes - plan.weights.bytes_per_gpu) * 9 // 10}",
                       check.kind)
    if check.kind == "no_kv_memory":
        return Refusal(NO_MEMORY, more, check.kind)
    if check.kind == "block_size":
        return _refusal_words(check)
    return Refusal(f"CUDA out of memory occurred when warming up sampler with {check.count} dummy requests. "
                   "Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
                   _warmup_fix(model, setup, check, advice), check.kind)


def _free_memory_fix(model, setup: deployment.Setup, check: StartCheck, advice: str) -> str:
    top = math.floor(check.available_bytes / setup.gpu_bytes * 100) / 100
    return _checked(model, setup, [{"gpu_memory_utilization": round(top - 0.01 * k, 2)} for k in range(10)],
                    f"--gpu-memory-utilization {top}", advice)


def block_size_refusal(plan: VllmPlan, setup: deployment.Setup, mla: bool = False) -> Refusal | None:
    """CPU_ATTN refuses the block size vLLM ends with (after its own adjustments, `plan.block_size`)
    when it is not a multiple of 32 (an MLA model has its own CPU backends)."""
    if mla or setup.platform != "cpu" or plan.block_size % CPU_KERNEL_BLOCK == 0:
        return None
    return _refusal_words(StartCheck("block_size", count=plan.block_size))


def memory_refusal(plan: SetupPlan, setup: deployment.Setup, advice: str = "") -> Refusal | None:
    """The memory failure among the plan's (no memory for the cache, or too little for one request)."""
    check = next((c for c in plan.start.failures if c.kind in ("no_kv_memory", "kv_too_small")), None)
    return None if check is None else _refusal(plan, setup, check, advice)


def _refusal_words(check: StartCheck) -> Refusal:
    fixed = CPU_KERNEL_BLOCK * math.ceil(check.count / CPU_KERNEL_BLOCK)
    return Refusal(f"No common block size for {check.count} (CPU_ATTN: [MultipleOf(32)]).",
                   f"--block-size {fixed} (the CPU kernel takes multiples of 32; vLLM's CPU default is 128)",
                   check.kind)


def refusals(plan: SetupPlan, setup: deployment.Setup, advice: str = "", mla: bool = False,
             model=None) -> list[Refusal]:
    """Every failure the planner foresees for this plan (empty: it should start). `mla` is kept for
    callers; the plan's own checks know the model. Given the model, each suggested change is
    re-planned under the same rules (on every rank and stage) before it is offered."""
    del mla
    return [_refusal(plan, setup, c, advice, model) for c in plan.start.failures]


def risks(plan: SetupPlan) -> list[Risk]:
    """The thin margins, each naming its term and the margin."""
    out = []
    for c in plan.start.risks:
        margin = c.available_bytes - c.needed_bytes
        if c.kind == "kv_margin":
            text = (f"The KV cache holds one request of max_model_len with {_gib(margin)} to spare, within "
                    f"kvviz's modelled error on the budget ({_gib(c.available_bytes)}): vLLM may refuse it.")
        elif c.kind == "kv_given_margin":
            text = (f"--kv-cache-memory-bytes leaves {_gib(c.available_bytes)} for the profile run's peak, "
                    f"non-torch memory and CUDA graphs, which kvviz models at {_gib(c.needed_bytes)}: "
                    "the first large batches may run out of memory (vLLM does not check it).")
        else:
            text = (f"After the KV cache, {_gib(c.available_bytes)} is left outside gpu_memory_utilization for "
                    f"CUDA graphs and the warm-up of {c.count:,} sampler rows; published start-ups failed "
                    f"there with under {_gib(round(2.25 * GIB))}: a lower --gpu-memory-utilization or "
                    "--max-num-seqs is safer.")
        out.append(Risk(c.kind, margin, text))
    return out


def fit_advice(plan: SetupPlan, model, setup: deployment.Setup) -> str:
    """What would start it, re-planned under the same rules (deployment.fit_advice), when it fails."""
    return deployment.fit_advice(model, setup) if plan.start.failures else ""


def serve_command(model_id: str, setup: deployment.Setup, plan: SetupPlan) -> str:
    """The `vllm serve` line that realizes this plan (vLLM's flags; its defaults left out)."""
    v = plan.vllm
    flags: list[str] = []

    def add(flag: str, value, default=None) -> None:
        if value is not None and value != default:
            flags.extend([flag, str(value)])

    add("--tensor-parallel-size", setup.par.tp, 1)
    add("--pipeline-parallel-size", setup.par.pp, 1)
    add("--data-parallel-size", setup.par.dp, 1)
    if isinstance(v, VllmPlan):
        add("--max-model-len", v.max_model_len)
    add("--block-size", setup.block_size, None if setup.platform == "cpu" else 16)
    add("--kv-cache-dtype", {"fp8": "fp8", "int8": "int8"}.get(setup.kv_dtype))
    add("--max-num-batched-tokens", setup.max_num_batched_tokens)
    add("--max-num-seqs", setup.max_num_seqs)
    if setup.kv_cache_memory_bytes:
        add("--kv-cache-memory-bytes", setup.kv_cache_memory_bytes)
    else:
        add("--gpu-memory-utilization", deployment.utilization(setup),
            deployment.release(setup).default_gpu_memory_utilization)
    if setup.enforce_eager:
        flags.append("--enforce-eager")
    if not setup.prefix_caching:
        flags.append("--no-enable-prefix-caching")
    return " ".join(["vllm", "serve", shlex.quote(model_id), *flags])
