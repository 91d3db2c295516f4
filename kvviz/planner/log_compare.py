"""vLLM's start-up log beside what kvviz computes from the same model and flags, figure by figure.

Two checks, kept apart because they test different things:

* **the budget** — kvviz's KV memory for the setup as given (its modelled deductions, or the
  overhead fraction) against the memory vLLM printed: a gap here is vLLM's deductions kvviz does
  not know (non-torch memory, CUDA graphs) or models roughly (activations, sampler);
* **the allocation** — kvviz planned *with the KV memory the log printed* (as
  `--kv-cache-memory-bytes`, at the log's max_model_len and block size): tokens, concurrency and
  block size then test kvviz's block arithmetic alone. The log prints GiB to two decimals, so
  kvviz plans the range ± 0.005 GiB and calls a figure inside it "agrees".
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from kvviz.planner import deployment
from kvviz.planner.capacity import ModelKV
from kvviz.planner.results import VllmPlan
from kvviz.planner.vllm_log import GIB, LogFacts

HALF_CENT_GIB = GIB // 200  # the log's rounding: 0.005 GiB


@dataclass(frozen=True)
class Row:
    """One figure: vLLM's log, kvviz's, and the difference in words (all plain text)."""

    figure: str
    vllm: str
    kvviz: str
    verdict: str


def _gib(b: int | None) -> str:
    return "–" if b is None else f"{b / GIB:,.2f} GiB"


def _plan(model: ModelKV, setup: deployment.Setup, names, kv_bytes: int | None = None) -> VllmPlan | None:
    if kv_bytes is not None:
        setup = replace(setup, kv_cache_memory_bytes=max(1, kv_bytes))
    plan = deployment.plan_setup(model, setup, names)
    return plan.vllm if isinstance(plan.vllm, VllmPlan) else None


def log_setup(facts: LogFacts, setup: deployment.Setup) -> deployment.Setup:
    """The setup with the log's max_model_len and block size where it printed them."""
    return replace(setup, max_model_len=facts.max_model_len or setup.max_model_len,
                   block_size=facts.block_size or setup.block_size)


def budget_row(facts: LogFacts, model: ModelKV, setup: deployment.Setup, names) -> Row:
    ours = deployment.plan_setup(model, setup, names).per_gpu.kv_budget_bytes
    theirs = facts.kv_memory_bytes
    if theirs is None:
        return Row("KV cache memory per GPU", "not in the log", _gib(ours), "–")
    gap = ours - theirs
    if abs(gap) <= HALF_CENT_GIB:
        verdict = "agrees (within the log's 0.01 GiB rounding)"
    elif gap > 0:
        verdict = (f"vLLM has {gap / GIB:,.2f} GiB less: deductions kvviz does not know (non-torch "
                   "memory, CUDA graphs) or models low (activation peak, sampler)")
    else:
        verdict = (f"vLLM has {-gap / GIB:,.2f} GiB more: kvviz's deductions (or its overhead "
                   "fraction, or the GPU's bytes) are larger than vLLM's")
    return Row("KV cache memory per GPU", _gib(theirs), _gib(ours), verdict)


def _within(value, low, high, what: str, unit: str = "") -> str:
    if low <= value <= high:
        return "agrees (within the log's 0.01 GiB rounding)"
    nearest = low if abs(value - low) < abs(value - high) else high
    return f"differs by {value - nearest:+,.2f}{unit} {what}".replace(".00", "")


def allocation_rows(facts: LogFacts, model: ModelKV, setup: deployment.Setup, names) -> list[Row]:
    """kvviz planned with the log's KV memory, ± its rounding: tokens, concurrency, blocks, groups."""
    if facts.kv_memory_bytes is None:
        return [Row("KV cache size (tokens)", _num(facts.kv_cache_tokens), "–",
                    "the log gave no KV memory to plan with")]
    setup = log_setup(facts, setup)
    low = _plan(model, setup, names, facts.kv_memory_bytes - HALF_CENT_GIB)
    mid = _plan(model, setup, names, facts.kv_memory_bytes)
    high = _plan(model, setup, names, facts.kv_memory_bytes + HALF_CENT_GIB)
    if mid is None:
        return [Row("KV cache size (tokens)", _num(facts.kv_cache_tokens), "–", "kvviz cannot plan vLLM here")]
    rows = []
    if facts.kv_cache_tokens is not None:
        rows.append(Row("KV cache size (tokens)", _num(facts.kv_cache_tokens), _range(low.num_tokens, high.num_tokens),
                        _within(facts.kv_cache_tokens, low.num_tokens, high.num_tokens, "tokens")))
    if facts.max_concurrency is not None:
        lo, hi = round(low.max_concurrency, 2), round(high.max_concurrency, 2)
        rows.append(Row(f"Maximum concurrency at {mid.max_model_len:,} tokens", f"{facts.max_concurrency:.2f}×",
                        f"{lo:.2f}×" if lo == hi else f"{lo:.2f}–{hi:.2f}×",
                        _within(facts.max_concurrency, lo, hi, "× requests")))
    if facts.num_blocks is not None:
        rows.append(Row("Blocks", _num(facts.num_blocks), _range(low.num_blocks, high.num_blocks),
                        _within(facts.num_blocks, low.num_blocks, high.num_blocks, "blocks")))
    rows.append(block_row(facts, mid))
    return rows


def block_row(facts: LogFacts, plan: VllmPlan) -> Row:
    theirs = facts.block_size or (max(facts.group_block_sizes) if facts.group_block_sizes else None)
    groups = f" ({len(facts.group_block_sizes)} group sizes: {facts.group_block_sizes})" if facts.group_block_sizes else ""
    ours = f"{plan.block_size} ({plan.num_groups} KV cache group(s), {plan.layout})"
    if theirs is None:
        return Row("Block size", "not in the log", ours, "–")
    verdict = "agrees" if theirs == plan.block_size else f"differs: vLLM {theirs}, kvviz {plan.block_size}"
    return Row("Block size", f"{theirs}{groups}", ours, verdict)


def _num(value: int | None) -> str:
    return "–" if value is None else f"{value:,}"


def _range(low: int, high: int) -> str:
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def deduction_rows(facts: LogFacts, setup: deployment.Setup, model: ModelKV, names) -> list[Row]:
    """The terms vLLM measured (older logs print them) beside kvviz's model of each."""
    b = deployment.plan_setup(model, setup, names).vllm_budget
    rows = []
    pairs = (("Weights per GPU", facts.weights_bytes, b.weight_bytes if b else None),
             ("Activation peak (profile run)", facts.activation_peak_bytes, b.activation_peak_bytes if b else None),
             ("Non-torch memory", facts.non_torch_bytes, None))
    for figure, theirs, ours in pairs:
        if theirs is None:
            continue
        verdict = ("kvviz cannot know it" if ours is None and figure == "Non-torch memory"
                   else "give vLLM's flags for kvviz's figure" if ours is None
                   else f"differs by {(ours - theirs) / GIB:+,.2f} GiB (kvviz modelled)")
        rows.append(Row(figure, _gib(theirs), _gib(ours), verdict))
    return rows


def compare(facts: LogFacts, model: ModelKV, setup: deployment.Setup,
            names=deployment.SETTING_NAMES) -> list[Row]:
    """Every figure the log printed, beside kvviz's."""
    return ([budget_row(facts, model, setup, names)] + deduction_rows(facts, setup, model, names)
            + allocation_rows(facts, model, setup, names))
