"""Will it start? The start-up refusals of vLLM 0.32 the planner can foresee, in vLLM's own
words, each with the smallest change that starts it; and the `vllm serve` line of the plan.

Foreseen (vLLM's source, .venv-vllm):

* **no common block size** (`v1/worker/utils.select_common_block_size`): the CPU attention
  backend (CPU_ATTN) takes block sizes that are multiples of 32, so full-attention layers left at
  `--block-size 16` refuse to start with "No common block size for 16 (CPU_ATTN: [MultipleOf(32)])."
  vLLM itself raises the block size where it can, and kvviz.planner.serving_plan the same way:
  Mamba hybrids are realigned to whole kernel blocks, sliding-window layers take their kernel's
  block (32) and full layers beside them scale up to the same page; the refusal is left for the
  block size vLLM ends with;
* **too little KV for one request** (`v1/core/kv_cache_utils._check_enough_kv_cache_memory`):
  "To serve at least one request with the model's max seq len (L), (X GiB KV cache is needed,
  which is larger than the available KV cache memory (Y GiB)."; and "No available memory for the
  cache blocks." when nothing is left.

Not foreseen, said so: out-of-memory while loading or profiling (vLLM measures), a quantization
or attention backend the GPU lacks, a model architecture vLLM does not implement.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from kvviz.planner import deployment, serving_plan
from kvviz.planner.results import SetupPlan, VllmPlan

GIB = 2**30
CPU_KERNEL_BLOCK = serving_plan.CPU.kernel_block  # CPU_ATTN's MultipleOf(32), one figure for both
NOT_FORESEEN = ("out-of-memory while loading weights or profiling (vLLM measures it), a quantization "
                "or attention kernel the GPU lacks, an architecture vLLM does not implement")


@dataclass(frozen=True)
class Refusal:
    """One start-up refusal: vLLM's message, and the smallest change that starts it."""

    message: str  # in vLLM's words
    fix: str


def _format_gib(b: int) -> str:
    """vLLM's format_gib: GiB rounded to 2 decimals, Python's repr of the float."""
    return f"{round(b / GIB, 2)}"


def block_size_refusal(plan: VllmPlan, setup: deployment.Setup, mla: bool = False) -> Refusal | None:
    """CPU_ATTN refuses the block size vLLM ends with (after its own adjustments, `plan.block_size`)
    when it is not a multiple of 32 (an MLA model has its own CPU backends: CPU_MLA forces 16,
    AMX_MLA takes any)."""
    if mla or setup.platform != "cpu" or plan.block_size % CPU_KERNEL_BLOCK == 0:
        return None
    fixed = CPU_KERNEL_BLOCK * math.ceil(plan.block_size / CPU_KERNEL_BLOCK)
    return Refusal(f"No common block size for {plan.block_size} (CPU_ATTN: [MultipleOf(32)]).",
                   f"--block-size {fixed} (the CPU kernel takes multiples of 32; vLLM's CPU default is 128)")


def memory_refusal(plan: SetupPlan, advice: str) -> Refusal | None:
    """Too little KV for one request of max_model_len, as vLLM words it."""
    v = plan.vllm
    if not isinstance(v, VllmPlan) or v.starts:
        return None
    available = plan.per_gpu.kv_budget_bytes
    if available <= 0:
        return Refusal("No available memory for the cache blocks. Try increasing "
                       "`gpu_memory_utilization` when initializing the engine.", advice or "more memory per GPU")
    needed = v.blocks_per_request * v.page_bytes * max(1, v.group_size)
    message = memory_message(needed, available, v.max_model_len, v.longest_max_model_len)
    fix = (f"--max-model-len {v.longest_max_model_len}" if v.longest_max_model_len else "")
    fix = "; or ".join(part for part in (fix, advice) if part)
    return Refusal(message, fix or "a GPU with more memory")


def memory_message(needed: int, available: int, max_model_len: int, estimate: int) -> str:
    """vLLM's own sentence (kv_cache_utils._check_enough_kv_cache_memory), up to its advice."""
    estimated = (f"Based on the available memory, the estimated maximum model length is "
                 f"{estimate}. " if estimate > 0 else "")
    return (f"To serve at least one request with the model's max seq len ({max_model_len}), "
            f"({_format_gib(needed)} GiB KV cache is needed, which is larger than the available "
            f"KV cache memory ({_format_gib(available)} GiB). {estimated}").strip()


def refusals(plan: SetupPlan, setup: deployment.Setup, advice: str = "", mla: bool = False) -> list[Refusal]:
    """Every refusal the planner foresees for this setup (empty: it should start)."""
    if not isinstance(plan.vllm, VllmPlan):
        return []
    found = [block_size_refusal(plan.vllm, setup, mla), memory_refusal(plan, advice)]
    return [r for r in found if r is not None]


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
        add("--gpu-memory-utilization", deployment.utilization(setup), 0.92)
    if not setup.prefix_caching:
        flags.append("--no-enable-prefix-caching")
    return " ".join(["vllm", "serve", shlex.quote(model_id), *flags])
