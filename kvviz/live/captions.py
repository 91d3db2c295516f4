"""Plain-language captions and headline figures, carrying the live numbers. Pure functions."""
from __future__ import annotations

from kvviz.core import spec
from kvviz.engine import race
from kvviz.core import trace
from kvviz.core.events import StepEvent
from kvviz.core.trace import percentile
from kvviz.core.trace import achieved_bandwidth_bytes_per_s
from kvviz.core.units import fmt_bytes, fmt_ms, fmt_ratio


def headline(meta: dict, sums: dict, last: StepEvent,
             wall_tokens_per_s: float | None = None) -> list[tuple[str, str, str]]:
    """(label, value, help) for the row of headline figures.

    `wall_tokens_per_s`: the rate the page itself saw (None where it was not measured: a replay,
    a redrawn result), shown beside the compute-only rate so that neither is read as the other.
    """
    c = sums["modes"].get("cached", {})
    same_steps = sums["speedup_steps"]
    speedup = sums["recompute_speedup"] if same_steps >= race.MIN_FIT_STEPS else None
    return [
        ("Tokens", f"{c.get('new_tokens', 0)} × {meta['batch']}", "generated per sequence × batch"),
        cache_figure(last),
        ("Formula (computed)", fmt_bytes(last.formula_bytes),
         "computed from the model's config, not measured: per layer (kvviz.core.layout): tokens held × K+V values per token × batch × bytes per element, "
         "a sliding / chunked layer holding at most its window − 1, plus state layers' fixed state"),
        ("Time to first token", fmt_ms(c.get("ttft_ms")), "the prefill: the whole prompt in one pass"),
        ("Decode step (median)", fmt_ms(c.get("itl_median_ms")),
         "median time of one decode step's forward pass and sampling, as the engine times it; "
         "the page's drawing is not in it"),
        ("Tokens/s (compute)", f"{c['tokens_per_s']:.1f}" if c.get("tokens_per_s") and c.get("new_tokens", 0) > 1
         else "–", "tokens × batch / the summed forward + sampling time of every step (prefill "
                   "included; shown from the first decode step on): the model's speed alone"),
        ("Tokens/s (wall clock)", f"{wall_tokens_per_s:.1f}" if wall_tokens_per_s else "–",
         "tokens × batch / wall-clock seconds from the first token to the latest, as this page "
         "received them: its own compute, plus, with the race on, the turns the no-cache run takes "
         "on the same device (most of the gap then), the page's drawing and whatever else the machine ran. "
         "Shown for runs made here, not for replays"),
        ("Recompute ÷ cached (same steps)", fmt_ratio(speedup),
         f"measured: recompute time / cached time over the first {steps(same_steps)} that "
         f"both runs made (shown from {race.MIN_FIT_STEPS} steps on: before, both are mostly the same "
         "prefill). The race caption's figure extrapolates the no-cache run to every token "
         "of the cached run, so it is larger"),
    ]


def steps(n: int | None) -> str:
    return "no steps" if not n else f"{n} step" if n == 1 else f"{n} steps"


def cache_figure(last: StepEvent) -> tuple[str, str, str]:
    if last.blocks is not None and last.blocks.contiguous_is_real:
        return ("KV cache (allocated)", fmt_bytes(last.kv_bytes),
                "StaticCache allocates every token slot up front; the formula counts the tokens held")
    pinned = last.storage_bytes
    if pinned is not None and pinned != last.kv_bytes:
        return ("KV cache (measured)", fmt_bytes(last.kv_bytes),
                f"numel × element size of every layer's K, V and state tensors; they pin {fmt_bytes(pinned)} "
                "of storage, because a sliding layer keeps a view of a larger concatenated buffer")
    return ("KV cache (measured)", fmt_bytes(last.kv_bytes),
            "numel × element size of every layer's K, V and state tensors")


def is_uniform(meta: dict) -> bool:
    """Every layer a plain full-attention layer, without a state (`kvviz.core.spec.is_uniform_full`
    on the run's specs; traces from before the layout model count as such)."""
    return spec.is_uniform_full(trace.layer_specs(meta))


def layout_clause(meta: dict) -> str:
    """"layers: 52 × sliding 1024, 10 × full; ..." for captions of mixed layouts, else ""."""
    if is_uniform(meta):
        return ""
    state = meta.get("state_bytes") or 0
    fixed = f"; state layers keep {fmt_bytes(state * meta['batch'])} whatever the length" if state else ""
    return (f" Layers: {meta.get('layout', '')}; a sliding or chunked layer stops growing at its "
            f"window − 1 tokens, a shared layer reuses another's cache{fixed}.")


def layers_caption(meta: dict) -> str:
    per_token = meta["bytes_per_token"] * meta["batch"]
    if not is_uniform(meta):
        return (f"Each new token adds up to {fmt_bytes(per_token)} across {meta['num_layers']} layers"
                f"{' (batch ' + str(meta['batch']) + ')' if meta['batch'] > 1 else ''}." + layout_clause(meta))
    return (f"Each new token adds {fmt_bytes(per_token)} across {meta['num_layers']} layers "
            f"({fmt_bytes(per_token / meta['num_layers'])} per layer: K and V, each "
            f"{meta['num_kv_heads']} KV heads × {meta['head_dim']} numbers of {meta['elem_bytes']} bytes"
            f"{' × batch ' + str(meta['batch']) if meta['batch'] > 1 else ''}).")


def total_caption(meta: dict, last: StepEvent) -> str:
    tokens = last.seq_len - 1
    formula = (f"the formula 2 × {meta['num_layers']} × {meta['num_kv_heads']} × {meta['head_dim']} × "
               f"{tokens} tokens × {meta['batch']} × {meta['elem_bytes']} B" if is_uniform(meta) else
               f"the per-layer formula at {tokens} tokens × {meta['batch']} × {meta['elem_bytes']} B")
    return (f"Measured {fmt_bytes(last.kv_bytes)}; {formula} gives {fmt_bytes(last.formula_bytes)}."
            f"{layout_clause(meta)} A contiguous reservation "
            f"for {meta['max_len']} tokens (computed) holds {fmt_bytes(meta['bytes_per_token'] * meta['max_len'] * meta['batch'])}; "
            f"the weights take {fmt_bytes(meta['weight_bytes'])}, so the cache is "
            f"{last.kv_bytes / max(meta['weight_bytes'], 1):.1%} of them.")


def wasted_fractions(last: StepEvent, max_len: int) -> tuple[float, float]:
    """(paged, contiguous): the share of reserved token slots that hold no token."""
    b, tokens = last.blocks, last.seq_len - 1
    per_seq_blocks = b.num_used_blocks // max(len(last.token_ids), 1)
    paged = 1 - tokens / (per_seq_blocks * b.block_size) if per_seq_blocks else 0.0
    return paged, 1 - tokens / max_len


def blocks_caption(meta: dict, last: StepEvent) -> str:
    b = last.blocks
    if b is None:
        return ""
    paged, contiguous = wasted_fractions(last, meta["max_len"])
    kind = "real: StaticCache allocated it" if b.contiguous_is_real else "computed, not allocated"
    return (f"{b.num_used_blocks} of {b.num_blocks} blocks of {b.block_size} slots in use; each "
            f"sequence's last block holds {b.num_slots_in_last_block}/{b.block_size}. Paged (modelled) "
            f"wastes {paged:.0%}, only inside last blocks; the contiguous {meta['max_len']}-token "
            f"reservation ({kind}) wastes {contiguous:.0%} so far.")


def timings_caption(meta: dict, cached: list[StepEvent]) -> str:
    prefill = cached[0]
    decode = [e.step_ms for e in cached[1:]]
    text = f"The prefill read {meta['prompt_tokens']} prompt tokens in {fmt_ms(prefill.step_ms)}"
    if not decode:  # the same sentences, figures to come: the caption keeps its lines as they arrive
        return (text + "; each decode step feeds one new token and reads the cache: median and slowest "
                "from the first decode step on. Reading the weights "
                f"({fmt_bytes(meta['weight_bytes'])}) and the cache once per step at that pace gives "
                "the GB/s achieved; " + SMALL_MODEL_NOTE + HEATMAP_NOTE)
    median = median_decode_ms(cached)
    return (text + f"; each decode step feeds one new token and reads the cache: median "
            f"{fmt_ms(median)}, slowest {fmt_ms(max(decode))}. "
            f"{bandwidth_sentence(meta, cached[-1].kv_bytes, median)}" + HEATMAP_NOTE)


SMALL_MODEL_NOTE = "a small model rarely nears the device's peak: per-kernel launch and framework overhead dominate."
HEATMAP_NOTE = " The heatmap shows each layer's share of every step."


def median_decode_ms(events: list[StepEvent]) -> float | None:
    """The median decode step: the one figure the headline and the timings caption both show."""
    return percentile([e.step_ms for e in events if e.phase == "decode"], 50)


def bandwidth_sentence(meta: dict, cache_bytes: int, step_ms: float) -> str:
    rate = achieved_bandwidth_bytes_per_s(meta["weight_bytes"], cache_bytes, step_ms) or 0.0
    return (f"Reading the weights ({fmt_bytes(meta['weight_bytes'])}) and the cache "
            f"({fmt_bytes(cache_bytes)}) once per step at that pace is ≈ {rate / 1e9:.1f} GB/s achieved; "
            + SMALL_MODEL_NOTE)


def chart_captions(meta: dict, cached: list[StepEvent]) -> dict[str, str]:
    last = cached[-1]
    return {"layers": layers_caption(meta), "total": total_caption(meta, last),
            "blocks": blocks_caption(meta, last), "timings": timings_caption(meta, cached)}


def parity(cached: list[StepEvent], recompute: list[StepEvent], final: bool = False) -> tuple[bool, str]:
    """Whether the recompute run chose the very same tokens as the cached run (so far, until `final`)."""
    for c, r in zip(cached, recompute):
        if c.token_ids != r.token_ids:
            return False, (f"Tokens differ from step {c.step} on. In half precision the two paths "
                           "round differently, so a near-tie can flip the argmax; in fp32 they agree.")
    if not recompute:
        return True, "Waiting for the first recomputed token…"
    if final:
        return True, f"Same tokens: all {tokens(len(recompute))} recomputed match the cached run."
    return True, f"Same tokens: all {tokens(len(recompute))} recomputed so far match the cached run."


def tokens(n: int) -> str:
    return f"{n} token" if n == 1 else f"{n} tokens"


def race_captions(cached: list[StepEvent], recompute: list[StepEvent], final: bool) -> dict[str, str]:
    return {"race": race_caption(cached, recompute, final), "positions": positions_caption(cached, recompute)}


def positions_caption(cached: list[StepEvent], recompute: list[StepEvent]) -> str:
    n = len(recompute)
    pos_c, pos_r = sum(e.positions for e in cached[:n]), sum(e.positions for e in recompute)
    return (f"For the same {tokens(n)}, the run without a cache pushed {pos_r:,} token positions "
            f"through the model and the cached run {pos_c:,}: every step without a cache re-reads "
            f"the whole text, so its work grows with the square of the length.")


def fmt_duration(ms: float) -> str:
    """A duration for people: 850 ms, 12.5 s, 43 min, 1.2 h."""
    if ms < 60_000:
        return fmt_ms(ms)
    if ms < 3_600_000:
        return f"{ms / 60_000:.0f} min" if ms >= 600_000 else f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"


def estimate_text(est: race.RaceEstimate) -> str:
    if est.is_range:
        return f"between ≈ {fmt_duration(est.low_ms)} and {fmt_duration(est.high_ms)}"
    return f"≈ {fmt_duration(est.low_ms)}"


ESTIMATE_TO_COME = (" Finishing all the tokens without a cache would take a time estimated once the cached "
                    "run ends, fitted to both runs' measured steps (each step costs a fixed time plus a "
                    "share per position it reads), then set against the cached time for the whole run. "
                    "The headline's Recompute ÷ cached (same steps) compares only the steps both runs "
                    "made, where the gap is still small.")


def race_caption(cached: list[StepEvent], recompute: list[StepEvent], final: bool) -> str:
    cached_ms = sum(e.step_ms for e in cached)
    done_ms = sum(e.step_ms for e in recompute)
    text = (f"Both runs take turns on one device and each clock counts only its own steps. "
            f"Without a cache: {tokens(len(recompute))} in {fmt_ms(done_ms)}; "
            f"with it: {tokens(len(cached))} in {fmt_ms(cached_ms)}.")
    if not final:  # the estimate's sentences, to come: the panel keeps its lines through the run
        return text + ESTIMATE_TO_COME
    if len(recompute) >= len(cached):
        return text
    est = race.estimate_total(cached, recompute, [e.seq_len - 1 for e in cached])
    if est is None or not any(e.phase == "decode" for e in recompute):
        return text
    ratio = (est.low_ms + est.high_ms) / 2 / cached_ms
    text += (f" Finishing all {len(cached)} tokens without a cache would take {estimate_text(est)} "
             f"(modelled: each step costs a fixed time plus a share per position it reads, fitted to "
             f"both runs' {len(cached) + len(recompute)} measured steps, {len(recompute)} of them "
             f"without a cache): ≈ {fmt_ratio(ratio)} the cached time for the whole run. The headline's "
             f"Recompute ÷ cached (same steps) compares only the {steps(len(recompute))} both runs made, "
             f"where the gap is still small.")
    return text
