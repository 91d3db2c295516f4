"""vLLM's start-up log beside what kvviz computes from the same model and flags, figure by figure.

kvviz plans with what the log states (its release, max_model_len, block size, TP / PP,
gpu_memory_utilization, max_num_seqs, max_num_batched_tokens and the device's total where it
prints them; the setup's for the rest) and with vLLM's own budget rules, so each row compares like
with like. Three checks, kept apart because they test different things:

* **will it start** — vLLM's outcome (it printed its KV cache and no failure, or the failure it
  hit, named by kvviz) beside kvviz's verdict;
* **the budget** — kvviz's KV memory and each modelled term (weights, activation peak, non-torch
  memory, CUDA graphs) beside the ones vLLM printed; with several workers, the smallest, as vLLM
  keeps;
* **the allocation** — kvviz planned *with the KV memory the log printed* (as
  `--kv-cache-memory-bytes`): tokens, concurrency and blocks then test kvviz's block arithmetic
  alone. The log prints GiB to two decimals, so kvviz plans the range ± 0.005 GiB and calls a
  figure inside it "agrees".
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from kvviz.core.errors import UserError
from kvviz.planner import deployment, parallel, vllm_versions
from kvviz.planner.capacity import ModelKV
from kvviz.planner.results import SetupPlan, VllmPlan
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


def with_log_release(facts: LogFacts, setup: deployment.Setup) -> deployment.Setup:
    """The setup planned for the release the log prints (and its engine), where it prints one."""
    if not facts.vllm_version:
        return setup
    try:
        vllm_versions.parse_version(facts.vllm_version)
    except UserError:
        return setup
    return replace(setup, vllm_version=facts.vllm_version, vllm_engine=facts.vllm_engine)


def log_setup(facts: LogFacts, setup: deployment.Setup) -> deployment.Setup:
    """The setup with every setting the log states, and vLLM's budget rules (its flags on)."""
    s = with_log_release(facts, setup)
    tp = facts.tensor_parallel_size or s.par.tp
    pp = facts.pipeline_parallel_size or s.par.pp
    util = facts.gpu_memory_utilization or s.gpu_memory_utilization or deployment.release(s).default_gpu_memory_utilization
    return replace(s, max_model_len=facts.max_model_len or s.max_model_len,
                   block_size=facts.block_size or s.block_size, par=parallel.Parallel(tp, pp, s.par.dp),
                   gpu_bytes=facts.total_gpu_bytes or s.gpu_bytes, gpu_memory_utilization=util,
                   kv_cache_memory_bytes=None,
                   max_num_seqs=facts.max_num_seqs or s.max_num_seqs,
                   max_num_batched_tokens=facts.max_num_batched_tokens or s.max_num_batched_tokens)


def _plan(model: ModelKV, setup: deployment.Setup, names, kv_bytes: int | None = None) -> VllmPlan | None:
    if kv_bytes is not None:
        setup = replace(setup, kv_cache_memory_bytes=max(1, kv_bytes))
    plan = deployment.plan_setup(model, setup, names)
    return plan.vllm if isinstance(plan.vllm, VllmPlan) else None


def release_row(facts: LogFacts, setup: deployment.Setup) -> Row:
    release = deployment.release(setup).name
    planned = f"{setup.vllm_version or vllm_versions.LATEST} ({release} rules)"
    if not facts.vllm_version:
        return Row("vLLM release", "not in the log", planned, "kvviz plans for the release chosen")
    engine = f", {facts.vllm_engine} engine" if facts.vllm_engine else ""
    return Row("vLLM release", f"{facts.vllm_version}{engine}", planned, "planned for the log's release")


def start_row(facts: LogFacts, plan: SetupPlan) -> Row:
    """vLLM's outcome beside kvviz's verdict."""
    ours = plan.start.word + (f": {', '.join(c.kind for c in plan.start.failures)}" if plan.start.failures else "")
    if facts.failure is None and facts.kv_memory_bytes is None and facts.kv_cache_tokens is None:
        return Row("Start-up", "not in the log", ours, "–")
    theirs = "started (sized its KV cache)" if facts.failure is None else f"failed: {facts.failure_words}"
    agree = (facts.failure is None) == plan.start.starts
    return Row("Start-up", theirs, ours, "agrees" if agree else "differs: kvviz's verdict is not vLLM's outcome")


def budget_row(facts: LogFacts, plan: SetupPlan) -> Row:
    b = plan.vllm_budget
    ours = b.kv_bytes_signed if b is not None else plan.per_gpu.kv_budget_bytes
    theirs = facts.kv_memory_bytes
    workers = f" (smallest of {facts.workers} workers)" if facts.workers > 1 else ""
    if theirs is None:
        return Row("KV cache memory per GPU", "not in the log", _gib(ours), "–")
    gap = ours - theirs
    if abs(gap) <= HALF_CENT_GIB:
        verdict = "agrees (within the log's 0.01 GiB rounding)"
    else:
        share = f" ({gap / abs(theirs):+.1%})" if theirs else ""
        verdict = (f"kvviz has {gap / GIB:+,.2f} GiB{share}: the terms below show where "
                   "(each of kvviz's is modelled)")
    return Row("KV cache memory per GPU", _gib(theirs) + workers, _gib(ours), verdict)


def _within(value, low, high, what: str, unit: str = "") -> str:
    if low <= value <= high:
        return "agrees (within the log's 0.01 GiB rounding)"
    nearest = low if abs(value - low) < abs(value - high) else high
    return f"differs by {value - nearest:+,.2f}{unit} {what}".replace(".00", "")


def allocation_rows(facts: LogFacts, model: ModelKV, setup: deployment.Setup, names) -> list[Row]:
    """kvviz planned with the log's KV memory, ± its rounding: tokens, concurrency, blocks, groups."""
    if facts.kv_memory_bytes is None or facts.kv_memory_bytes <= 0:
        return [Row("KV cache size (tokens)", _num(facts.kv_cache_tokens or facts.refused_tokens), "–",
                    "the log gave no positive KV memory to plan with")]
    low = _plan(model, setup, names, facts.kv_memory_bytes - HALF_CENT_GIB)
    mid = _plan(model, setup, names, facts.kv_memory_bytes)
    high = _plan(model, setup, names, facts.kv_memory_bytes + HALF_CENT_GIB)
    if mid is None:
        return [Row("KV cache size (tokens)", _num(facts.kv_cache_tokens), "–", "kvviz cannot plan vLLM here")]
    rows = []
    tokens = facts.kv_cache_tokens or facts.refused_tokens
    if tokens is not None:
        v0 = deployment.release(setup).v0
        lo, hi = ((low.num_blocks * low.block_size, high.num_blocks * high.block_size) if v0
                  else (low.num_tokens, high.num_tokens))
        rows.append(Row("KV cache size (tokens)", _num(tokens), _range(lo, hi), _within(tokens, lo, hi, "tokens")))
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


def deduction_rows(facts: LogFacts, plan: SetupPlan) -> list[Row]:
    """The terms vLLM printed beside kvviz's model of each (the weights always: kvviz's plan has them)."""
    b = plan.vllm_budget
    ours = {"weights": plan.weights.bytes_per_gpu if plan.weights.params_known else None,
            "activation": b.activation_peak_bytes if b else None, "non_torch": b.non_torch_bytes if b else None,
            "graphs": b.cuda_graph_bytes if b else None}
    pairs = (("Weights per GPU", facts.weights_bytes, ours["weights"]),
             ("Activation peak (profile run)", facts.activation_peak_bytes, ours["activation"]),
             ("Non-torch memory", facts.non_torch_bytes, ours["non_torch"]),
             ("CUDA graphs", facts.cuda_graph_bytes, ours["graphs"]))
    rows = []
    for figure, theirs, mine in pairs:
        if theirs is None and figure != "Weights per GPU":
            continue
        if theirs is None:
            verdict = "not in the log"
        elif mine is None:
            verdict = "kvviz has no figure (the weights are unknown)"
        elif abs(mine - theirs) <= HALF_CENT_GIB:
            verdict = "agrees (within the log's 0.01 GiB rounding)"
        else:
            verdict = f"differs by {(mine - theirs) / GIB:+,.2f} GiB (kvviz modelled)"
        rows.append(Row(figure, _gib(theirs) if theirs is not None else "not in the log", _gib(mine), verdict))
    return rows


def compare(facts: LogFacts, model: ModelKV, setup: deployment.Setup,
            names=deployment.SETTING_NAMES) -> list[Row]:
    """Every figure the log printed, beside kvviz's for the settings the log states."""
    s = log_setup(facts, setup)
    plan = deployment.plan_setup(model, s, names)
    return ([release_row(facts, s), start_row(facts, plan), budget_row(facts, plan)]
            + deduction_rows(facts, plan) + allocation_rows(facts, model, s, names))
