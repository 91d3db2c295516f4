"""The planner's sentences, worded once: `kvviz plan` prints them and the Capacity planner page
shows them, from the same typed results (kvviz.planner.results).

Memory and weights in GB (1e9 B), cache sizes in KiB / MiB (kvviz.core.units' policy). Where the
page and the CLI differ only in how the reader acts (a field on the page, a flag in the CLI),
the caller passes the remedy. Standard library and kvviz.core.units only.
"""
from __future__ import annotations

import math

from kvviz.planner.results import FitChange, OffloadWhatIf, PrefixWhatIf, SetupPlan, VllmPlan, Weights
from kvviz.core.blocks import hit_block_sentence
from kvviz.core.units import fmt_bytes_si
from kvviz.planner.vllm_memory import VllmBudget

ACTIVE_CONVENTION = ("routed experts k of E; an untied embedding table not counted, as gpt-oss and "
                     "Llama 4 publish it: a token reads one row of it; Qwen counts the table in")
DENSE_ACTIVE = "every weight but the untied input embedding table, of which a token reads one row"


def fmt_seconds(s: float | None) -> str:
    """12 µs / 1.50 ms / 2.00 s: decode step floors span six orders of magnitude."""
    if s is None or math.isinf(s):
        return "–"
    if s < 1e-3:
        return f"{s * 1e6:,.0f} µs"
    return f"{s * 1e3:,.2f} ms" if s < 1 else f"{s:,.2f} s"


# ---------------------------------------------------------------- memory


def budget_sentence(plan: SetupPlan) -> str:
    """Per GPU: memory − weights (their format) − overhead → what is left for KV caches; vLLM's
    own deductions instead when its flags were given."""
    if plan.vllm_budget is not None:
        return vllm_budget_sentence(plan.vllm_budget, plan.weights.weight_dtype)
    p = plan.per_gpu
    return (f"Per GPU: {fmt_bytes_si(p.memory_bytes)} − weights {fmt_bytes_si(p.weight_bytes)} ({plan.weights.weight_dtype}) "
            f"− overhead {fmt_bytes_si(p.overhead_bytes)} → {fmt_bytes_si(p.kv_budget_bytes)} for KV caches.")


def vllm_budget_sentence(b: VllmBudget, weight_dtype: str) -> str:
    """vLLM's budget, term by term, each modelled term labelled, for the release planned for."""
    release = f"vLLM {b.vllm_version} ({b.release} rules)"
    if b.given:
        return (f"Per GPU: kv_cache_memory_bytes {b.kv_bytes:,} B ({fmt_bytes_si(b.kv_bytes)}) for KV caches, "
                f"as given: {release} then ignores gpu_memory_utilization and checks nothing (weights "
                f"{fmt_bytes_si(b.weight_bytes)} ({weight_dtype}) of {fmt_bytes_si(b.total_bytes)}).")
    stage = f" on pipeline stage {b.stage + 1} of {len(b.stages)} (the smallest)" if len(b.stages) > 1 else ""
    graphs = (f" − CUDA graphs {fmt_bytes_si(b.cuda_graph_bytes)} (modelled: estimated before the KV cache, as from 0.21)"
              if b.cuda_graph_deducted else "")
    if b.kv_bytes_signed > 0:
        result = f"{fmt_bytes_si(b.kv_bytes)} ({b.kv_bytes / 2**30:,.2f} GiB, vLLM's unit) for KV caches"
    else:
        result = f"no memory for KV caches ({b.kv_bytes_signed / 2**30:,.2f} GiB, as vLLM's log would print it)"
    outside = ("" if b.cuda_graph_deducted else
               f" CUDA graphs ({fmt_bytes_si(b.cuda_graph_bytes)}, modelled) are captured outside the budget afterwards.")
    sampler = (f", or a sampler pass over max_num_seqs {b.max_num_seqs:,} rows of logits, {fmt_bytes_si(b.sampler_bytes)}"
               if b.sampler_bytes else "")
    return (f"Per GPU{stage}, as {release} computes it: {fmt_bytes_si(b.total_bytes)} × gpu_memory_utilization "
            f"{b.gpu_memory_utilization:g} = {fmt_bytes_si(b.requested_bytes)} − weights {fmt_bytes_si(b.weight_bytes)} "
            f"({weight_dtype}) − activation peak {fmt_bytes_si(b.activation_peak_bytes)} (modelled: the larger of a "
            f"forward pass of max_num_batched_tokens {b.max_num_batched_tokens:,}, {fmt_bytes_si(b.forward_bytes)}"
            f"{sampler}) − non-torch memory {fmt_bytes_si(b.non_torch_bytes)} (modelled: CUDA runtime, NCCL and "
            f"all-reduce buffers){graphs} → {result}.{outside}")


def weights_sentence(w: Weights) -> str:
    """The parameter count, its source, the stored format and size, and what a token reads."""
    stored = w.checkpoint_bytes if w.checkpoint_bytes and "linear layers" not in w.weight_dtype and \
        w.weight_dtype not in ("fp32", "fp16") else w.bytes_total
    text = (f"{w.params_total:,} parameters ({w.params_source}) stored as {w.weight_dtype} = "
            f"{fmt_bytes_si(stored)}")
    if abs(stored - w.bytes_total) > stored // 1000:
        text += (f"; vLLM holds {fmt_bytes_si(w.bytes_total)} of them on this GPU (MXFP4 experts laid out for its "
                 "kernel, modelled)")
    if w.params_active != w.params_total:
        text += (f"; {w.params_active:,} active per token = {fmt_bytes_si(w.bytes_active)} read per decode "
                 f"step ({ACTIVE_CONVENTION if w.moe else DENSE_ACTIVE})")
    return text + "."


def params_unknown_sentence(remedy: str) -> str:
    """When transformers cannot build the architecture and no count was given."""
    return ("Parameter count unknown (transformers cannot build this architecture): the weights "
            f"are counted as 0 bytes. {remedy}")


def nothing_fits_sentence() -> str:
    return ("The weights and overhead fill each GPU: no request fits. Add GPUs (TP or PP) or use "
            "a smaller weight dtype.")


def longer_than_trained_sentence(tokens: list[int], max_position: int) -> str:
    listed = " / ".join(f"{t:,}" for t in tokens)
    verb = "is" if len(tokens) == 1 else "are"
    return f"{listed} tokens {verb} longer than the model was trained for ({max_position:,} tokens)."


# ---------------------------------------------------------------- what-ifs


def prefix_sentence(p: PrefixWhatIf, requests_without: int) -> str:
    return (f"Modelled: with a shared {p.prefix_tokens:,}-token system prompt stored once "
            f"({p.shared_tokens:,} tokens in whole blocks of {p.hit_block:,}), "
            f"{p.requests_per_replica:,} requests fit per replica instead of {requests_without:,}.")


def offload_sentence(o: OffloadWhatIf) -> str:
    return (f"Modelled: a {fmt_bytes_si(o.offload_bytes)} CPU tier keeps {o.requests_kept_per_replica:,} "
            f"requests' caches per replica; {o.requests_decoding_per_replica:,} of them decode at "
            f"once on the GPUs, and bringing one back takes ≈ {fmt_seconds(o.swap_in_s_per_request)} "
            f"at an assumed {o.pcie_bytes_per_s / 1e9:.0f} GB/s (PCIe 5.0 x16).")


def what_if_sentences(plan: SetupPlan) -> list[str]:
    """The prefix-sharing and CPU-offload what-ifs that were asked about, in words."""
    out = []
    if plan.prefix:
        out.append(prefix_sentence(plan.prefix, plan.plain.requests_per_replica))
    if plan.offload:
        out.append(offload_sentence(plan.offload))
    return out


# ---------------------------------------------------------------- vLLM


def prefix_hit_sentence(v: VllmPlan) -> str:
    """Where vLLM's prefix-cache hits come in on this setup, and the prefix that never hits."""
    if not v.prefix_caching:
        return "Modelled: prefix caching is off on this setup, so vLLM reuses no prefix."
    sizes = sorted(set(v.group_block_sizes))
    groups = (f" (its cache groups' blocks of {', '.join(f'{b:,}' for b in sizes)} tokens: their least common "
              "multiple)" if len(sizes) > 1 else "")
    return "Modelled: " + hit_block_sentence(v.hit_block or v.block_size, groups, "on this setup") + "."


def vllm_unavailable_sentence(error: str) -> str:
    return f"Not available: {error}."


def fit_advice_sentence(change: FitChange | None, length: int, label: str,
                        tp_tries: tuple[int, ...], weight_tries: tuple[str, ...]) -> str:
    """What would let one request of `length` tokens start (None: nothing tried does)."""
    if change is None:
        return (f"It does not start with max_model_len {length:,}, and neither a TP up to {tp_tries[-1]} nor "
                f"{' / '.join(weight_tries)} weights start it (re-planned under the same rules): use a larger "
                f"GPU or a shorter max_model_len.")
    seqs = f" with --max-num-seqs {change.max_num_seqs} (the sampler's warm-up)" if change.max_num_seqs else ""
    if change.tp:
        return (f"It does not start on {label} with max_model_len {length:,}; TP {change.tp} ({change.gpus} GPUs)"
                f"{seqs} is the smallest that starts it (re-planned under the same rules, on every rank).")
    return (f"It does not start on {label} with max_model_len {length:,}; with {change.weight_dtype} weights"
            f"{seqs} it does (re-planned under the same rules, on every rank).")


def in_flight_sentence(vllm: VllmPlan, plain_requests: int, windowed: bool) -> str | None:
    """Why vLLM fits far fewer requests than plain bytes when sliding / chunked layers reserve for
    the tokens in flight (None when that is not what makes the difference)."""
    at_t = vllm.requests_at_context_per_replica
    if not windowed or not plain_requests or at_t >= 0.75 * plain_requests:
        return None
    batches = max(1, vllm.in_flight_tokens // max(1, vllm.max_num_batched_tokens))
    return (f"vLLM fits {at_t:,} requests where plain bytes fit {plain_requests:,}: besides its own "
            f"tokens, every sliding or chunked layer reserves blocks for the {vllm.in_flight_tokens:,} "
            f"tokens that may be in flight (max_num_batched_tokens {vllm.max_num_batched_tokens:,} × "
            f"{batches} batch(es) scheduled ahead), and it is that reservation, not rounding to whole "
            f"blocks, that cuts the count.")


def refusal_sentence(vllm: VllmPlan, advice: str) -> str:
    """What the CLI and the page both say when vLLM would refuse to start."""
    text = (f"vLLM would refuse to start: one request of max_model_len {vllm.max_model_len:,} "
            f"tokens needs more blocks than fit.")
    if vllm.longest_max_model_len:
        text += f" The longest that fits is {vllm.longest_max_model_len:,} tokens (max_model_len)."
    return f"{text} {advice}".strip()
