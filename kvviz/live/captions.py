"""Plain-language captions and headline figures, carrying the live numbers. Pure functions."""
from __future__ import annotations

import math
from dataclasses import dataclass

from kvviz.core import spec
from kvviz.engine import race
from kvviz.core import trace
from kvviz.core.events import StepEvent
from kvviz.core.meta import RunMeta
from kvviz.core.trace import percentile
from kvviz.core.trace import achieved_bandwidth_bytes_per_s
from kvviz.core.units import fmt_bytes, fmt_ms, fmt_ratio


def headline(meta: RunMeta, sums: trace.RunSummary, last: StepEvent,
             wall_tokens_per_s: float | None = None, cached: list[StepEvent] | None = None,
             recompute: list[StepEvent] | None = None) -> list[tuple[str, str, str]]:
    """(label, value, help) for the row of headline figures.

    `wall_tokens_per_s`: the rate the page itself saw (None where it was not measured: a replay,
    a redrawn result), shown beside the compute-only rate so that neither is read as the other.
    `cached`, `recompute`: the two runs' events, for the no-cache figures (`no_cache_figures`).
    """
    c = sums.mode("cached")
    return [
        ("Tokens", f"{c.new_tokens} × {meta.batch}", "generated per sequence × batch"),
        cache_figure(last),
        (FORMULA_LABEL, fmt_bytes(last.formula_bytes),
         "computed from the model's config, not measured: per layer (kvviz.core.layout): tokens held × K+V values per token × batch × bytes per element, "
         "a sliding / chunked layer holding at most its window − 1, plus state layers' fixed state"),
        ("Time to first token", fmt_ms(c.ttft_ms), "the prefill: the whole prompt in one pass"),
        ("Decode step (median)", fmt_ms(c.itl_median_ms),
         "median time of one decode step's forward pass and sampling, as the engine times it; "
         "the page's drawing is not in it"),
        ("Tokens/s (compute)", f"{c.tokens_per_s:.1f}" if c.tokens_per_s and c.new_tokens > 1
         else "–", "tokens × batch / the summed forward + sampling time of every step (prefill "
                   "included; shown from the first decode step on): the model's speed alone"),
        ("Tokens/s (wall clock)", f"{wall_tokens_per_s:.1f}" if wall_tokens_per_s else "–",
         "tokens × batch / wall-clock seconds from the first token to the latest, as this page "
         "received them: its own compute, plus, with the race on, the turns the no-cache run takes "
         "on the same device (most of the gap then), the page's drawing and whatever else the machine ran. "
         "Shown for runs made here, not for replays"),
        *no_cache_figures(sums, cached or [], recompute or []),
    ]


FORMULA_LABEL = "Formula (computed)"
LAST_STEP_LABEL = "No cache ÷ cache: last step"
RUN_LABEL = "No cache ÷ cache: whole run"


@dataclass(frozen=True, kw_only=True)
class NoCacheCost:
    """What the run without a cache costs against the cached one, from both runs' measured steps.

    step: the last step both runs made; step_ratio: its time without a cache / with it (measured);
    run_low / run_high: the whole run's time without a cache / with it, over every token of the
    cached run — measured when the no-cache run finished, else modelled (`race.estimate_total`: a
    range while it has fewer than race.MIN_FIT_STEPS steps); None before it has a decode step.
    """

    step: int
    positions: int  # token positions the step without a cache read (the whole text so far)
    recompute_ms: float
    cached_ms: float
    run_low: float | None
    run_high: float | None
    run_measured: bool

    @property
    def step_ratio(self) -> float:
        return self.recompute_ms / self.cached_ms

    @property
    def run_ratio(self) -> float | None:
        """The whole run's ratio: the middle of the range while it is one."""
        return None if self.run_low is None else (self.run_low + self.run_high) / 2


def no_cache_cost(cached: list[StepEvent], recompute: list[StepEvent]) -> NoCacheCost | None:
    """The no-cache cost, once both runs made a decode step (a step > 0: the prefills are the same work)."""
    shared = min(len(cached), len(recompute))
    if shared < 2 or cached[shared - 1].step_ms <= 0:
        return None
    c, r = cached[shared - 1], recompute[shared - 1]
    cached_ms = sum(e.step_ms for e in cached)
    low = high = None
    measured = len(recompute) >= len(cached)
    if cached_ms > 0:
        if measured:
            low = high = sum(e.step_ms for e in recompute[:len(cached)]) / cached_ms
        else:
            est = race.estimate_total(cached, recompute, [e.seq_len - 1 for e in cached])
            if est is not None:
                low, high = est.low_ms / cached_ms, est.high_ms / cached_ms
    return NoCacheCost(step=r.step, positions=r.positions, recompute_ms=r.step_ms, cached_ms=c.step_ms, run_low=low,
                       run_high=high, run_measured=measured)


def fmt_run_ratio(cost: NoCacheCost) -> str:
    """The whole run's ratio, the one form every place quotes it in (the headline, the race
    caption, the tour): "15.8×" measured, "≈ 15.8×" modelled (a range's middle: `fmt_run_range`)."""
    if cost.run_low is None:
        return "–"
    return fmt_ratio(cost.run_low) if cost.run_measured else f"≈ {fmt_ratio(cost.run_ratio)}"


def fmt_run_range(cost: NoCacheCost) -> str:
    """"between 14.7× and 25.3×" while the modelled figure is a range (fewer than
    race.MIN_FIT_STEPS steps without a cache), else ""."""
    if cost.run_low is None or cost.run_measured or cost.run_high <= cost.run_low:
        return ""
    return f"between {fmt_ratio(cost.run_low)} and {fmt_ratio(cost.run_high)}"


def run_basis(cost: NoCacheCost | None) -> str | None:
    """How the whole run's figure was found: "measured" (the run without a cache wrote every
    token), "modelled" (it was cut short: the rest is estimated), None before there is one."""
    if cost is None or cost.run_low is None:
        return None
    return "measured" if cost.run_measured else "modelled"


def no_cache_figures(sums: trace.RunSummary, cached: list[StepEvent],
                     recompute: list[StepEvent]) -> list[tuple[str, str, str]]:
    """The headline's two no-cache figures, the cost a room should remember: the last step both
    runs made, without ÷ with the cache (measured: "52.1×"), and the whole run ("≈ 36.4×",
    modelled until the no-cache run finishes). The same-steps ratio, which the shared prefill
    dilutes, is a detail of their help. The HTML report shows the very same figures."""
    cost = no_cache_cost(cached, recompute)
    same = sums.recompute_speedup
    same_steps = (f" Over the same {steps(sums.speedup_steps)} both runs made, the run without a cache "
                  f"took {fmt_ratio(same)} the cached time: both start with the same prefill, which "
                  "dilutes that ratio." if same is not None and sums.speedup_steps >= race.MIN_FIT_STEPS
                  else "")
    if cost is None:
        wait = ("shown once both runs made a decode step (turn on the no-cache race)")
        return [(LAST_STEP_LABEL, "–", f"how many times slower one step is without a cache; {wait}"),
                (RUN_LABEL, "–", f"how many times slower the whole run is without a cache; {wait}")]
    spread = fmt_run_range(cost)
    run = ("measured: the run without a cache finished" if cost.run_measured else
           f"modelled{', the middle of ' + spread if spread else ''}: the run without a cache was cut "
           "short, and each step it did not make costs a fixed time plus a share per position it "
           "reads, fitted to both runs' measured steps, as the race caption says")
    return [(LAST_STEP_LABEL, fmt_ratio(cost.step_ratio),
             f"Step {cost.step} took {fmt_ms(cost.recompute_ms)} without a cache (it re-read all "
             f"{cost.positions:,} positions) and {fmt_ms(cost.cached_ms)} with it (measured)."),
            (RUN_LABEL, fmt_run_ratio(cost),
             f"The time for every token of the cached run without a cache ÷ with it ({run})." + same_steps)]


def widest_headline() -> list[tuple[str, str, str]]:
    """The headline figures with every label in its longest form and values wider than a run
    shows, for the figures' hidden copy: the page reserves the row's height with it before a
    run's first figure arrives (kvviz.live.view_panel.metric_cards), so nothing below moves then."""
    help_text = "?"  # a help icon's room beside the label, as every figure has
    return [("Tokens", "9999 × 64", help_text), ("KV cache (allocated)", "1,023 MiB", help_text),
            (FORMULA_LABEL, "1,023 MiB", help_text), ("Time to first token", "999.99 s", help_text),
            ("Decode step (median)", "99.99 s", help_text), ("Tokens/s (compute)", "9999.9", help_text),
            ("Tokens/s (wall clock)", "9999.9", help_text), (LAST_STEP_LABEL, "≈ 999.9×", help_text),
            (RUN_LABEL, "≈ 999.9×", help_text)]


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


def is_uniform(meta: RunMeta) -> bool:
    """Every layer a plain full-attention layer, without a state (`kvviz.core.spec.is_uniform_full`
    on the run's specs; traces from before the layout model count as such)."""
    return spec.is_uniform_full(meta.specs)


def layout_clause(meta: RunMeta) -> str:
    """"layers: 52 × sliding 1024, 10 × full; ..." for captions of mixed layouts, else ""."""
    if is_uniform(meta):
        return ""
    state = meta.state_bytes or 0
    fixed = f"; state layers keep {fmt_bytes(state * meta.batch)} whatever the length" if state else ""
    kinds = spec.kinds_summary(meta.specs) or "not modelled"  # from the checked specs, never a file's words
    return (f" Layers: {kinds}; a sliding or chunked layer stops growing at its "
            f"window − 1 tokens, a shared layer reuses another's cache{fixed}.")


def layers_caption(meta: RunMeta) -> str:
    per_token = meta.bytes_per_token * meta.batch
    if not is_uniform(meta):
        return (f"Each new token adds up to {fmt_bytes(per_token)} across {meta.num_layers} layers"
                f"{' (batch ' + str(meta.batch) + ')' if meta.batch > 1 else ''}." + layout_clause(meta))
    return (f"Each new token adds {fmt_bytes(per_token)} across {meta.num_layers} layers "
            f"({fmt_bytes(per_token / meta.num_layers)} per layer: K and V, each "
            f"{meta.num_kv_heads} KV heads × {meta.head_dim} numbers of {meta.elem_bytes} bytes"
            f"{' × batch ' + str(meta.batch) if meta.batch > 1 else ''}).")


def total_caption(meta: RunMeta, last: StepEvent) -> str:
    tokens = last.seq_len - 1
    formula = (f"the formula 2 × {meta.num_layers} × {meta.num_kv_heads} × {meta.head_dim} × "
               f"{tokens} tokens × {meta.batch} × {meta.elem_bytes} B" if is_uniform(meta) else
               f"the per-layer formula at {tokens} tokens × {meta.batch} × {meta.elem_bytes} B")
    return (f"Measured {fmt_bytes(last.kv_bytes)}; {formula} gives {fmt_bytes(last.formula_bytes)}."
            f"{layout_clause(meta)} A contiguous reservation "
            f"for {meta.max_len} tokens (computed) holds {fmt_bytes(meta.reserved_bytes)}; "
            f"the weights take {fmt_bytes(meta.weight_bytes)}, so the cache is "
            f"{last.kv_bytes / max(meta.weight_bytes, 1):.1%} of them.")


def held_bytes(meta: RunMeta, last: StepEvent) -> int:
    """Bytes the tokens held after `last` take (tokens × bytes per token × batch): the used part
    of the blocks chart's bars."""
    return (last.seq_len - 1) * meta.bytes_per_token * meta.batch


def wasted_fractions(meta: RunMeta, last: StepEvent) -> tuple[float, float]:
    """(paged, contiguous): the share of each layout's reserved bytes that holds no token — the
    blocks chart's bars (kvviz.live.frames.reservation_frame: unused / reserved, 0 when nothing is
    reserved) and the blocks caption both read it, through `unused_label`."""
    held = held_bytes(meta, last)
    return tuple(max(reserved - held, 0) / reserved if reserved > 0 else 0.0
                 for reserved in (last.blocks.paged_bytes, last.blocks.contiguous_bytes))


def fmt_share(fraction: float) -> str:
    """A share as a whole percentage, halves rounded up (12.5 % -> "13%"), the same wherever shown."""
    return f"{math.floor(fraction * 100 + 0.5)}%"


def unused_label(fraction: float) -> str:
    """The blocks chart's bar label ("13% unused"); the caption quotes the same percentage."""
    return f"{fmt_share(fraction)} unused"


def blocks_caption(meta: RunMeta, last: StepEvent) -> str:
    b = last.blocks
    if b is None:
        return ""
    paged, contiguous = wasted_fractions(meta, last)
    kind = "real: StaticCache allocated it" if b.contiguous_is_real else "computed, not allocated"
    return (f"{b.num_used_blocks} of {b.num_blocks} blocks of {b.block_size} slots in use; each "
            f"sequence's last block holds {b.num_slots_in_last_block}/{b.block_size}. Paged (modelled) "
            f"leaves {fmt_share(paged)} unused, only inside last blocks; the contiguous {meta.max_len}-token "
            f"reservation ({kind}) leaves {fmt_share(contiguous)} unused so far.")


def timings_caption(meta: RunMeta, cached: list[StepEvent]) -> str:
    prefill = cached[0]
    decode = [e.step_ms for e in cached[1:]]
    text = f"The prefill read {meta.prompt_tokens} prompt tokens in {fmt_ms(prefill.step_ms)}"
    if not decode:  # the same sentences, figures to come: the caption keeps its lines as they arrive
        return (text + "; each decode step feeds one new token and reads the cache: median and slowest "
                "from the first decode step on. Reading the weights "
                f"({fmt_bytes(meta.weight_bytes)}) and the cache once per step at that pace gives "
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


def bandwidth_sentence(meta: RunMeta, cache_bytes: int, step_ms: float) -> str:
    rate = achieved_bandwidth_bytes_per_s(meta.weight_bytes, cache_bytes, step_ms) or 0.0
    return (f"Reading the weights ({fmt_bytes(meta.weight_bytes)}) and the cache "
            f"({fmt_bytes(cache_bytes)}) once per step at that pace is ≈ {rate / 1e9:.1f} GB/s achieved; "
            + SMALL_MODEL_NOTE)


def chart_captions(meta: RunMeta, cached: list[StepEvent]) -> dict[str, str]:
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


def run_ended(cached: list[StepEvent], max_new_tokens: int) -> bool:
    """The cached run reached its token budget or EOS in every sequence (not a Stop or a limit)."""
    return bool(cached) and (len(cached) >= max_new_tokens or all(cached[-1].finished))


SAME_TIME_SHARE = 0.05  # two clocks this close are "about the same time"


def turns_sentence(recompute: list[StepEvent], cached: list[StepEvent]) -> str:
    """What each run's clock shows, in words that follow from the two figures the race caption
    opens with (each run's summed step times): "about the same" only when they are."""
    without, with_cache = sum(e.step_ms for e in recompute), sum(e.step_ms for e in cached)
    if abs(without - with_cache) <= SAME_TIME_SHARE * with_cache:
        return f"Both had about the same time: {fmt_ms(without)} and {fmt_ms(with_cache)}."
    if without > with_cache:  # a run steps only while behind: its last step ran on past the other
        return f"It had {fmt_ms(without)} to the cached run's {fmt_ms(with_cache)}: its last step ran past."
    return f"It had {fmt_ms(without)} to the cached run's {fmt_ms(with_cache)}."


def race_stop_note(cached: list[StepEvent], recompute: list[StepEvent], ended: bool = True,
                   scrubbing: bool = False) -> str:
    """Why the no-cache text ends where it does (mid-word, often): the run ended, was stopped,
    or a replay's scrubber stands at this step; with each run's time, as measured."""
    if len(recompute) >= len(cached) and ended:
        return f"Finished: all {tokens(len(cached))} recomputed."
    so_far = f"{len(recompute)} of {tokens(len(cached))}"
    if scrubbing:
        where = f"At this step of the replay the run without a cache had written {so_far}."
    elif not ended:
        where = f"Stopped before the end: the run without a cache had written {so_far}."
    else:
        where = f"Stopped when the cached run finished, after {so_far}."
    return f"{where} {turns_sentence(recompute, cached)}"


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


def estimate_sentences(n_cached: str, estimate: str, measured: str, without: str, run_ratio: str,
                       step: str, step_ratio: str, shared: str, same_ratio: str, spread: str = "") -> str:
    """The race caption's closing sentences; during the run the same words with "…" for the
    figures to come, so the panel keeps its lines from the first step to the last. `run_ratio`:
    the headline's own figure (`fmt_run_ratio`); `spread`: its range while it is one."""
    spread = f" ({spread})" if spread else ""
    return (f" Finishing all {n_cached} tokens without a cache would take {estimate} (modelled: each step "
            f"costs a fixed time plus a share per position it reads, fitted to both runs' {measured} measured "
            f"steps, {without} of them without a cache): {run_ratio} the cached time for the whole "
            f"run{spread}. "
            f"The last step both made, step {step}, took {step_ratio} as long without a cache (measured); "
            f"over all {shared} steps both made it is only {same_ratio}, because both start with the same "
            f"prefill.")


ESTIMATE_TO_COME = estimate_sentences(*["…"] * 9)


def finished_sentences(n_cached: str, run_ratio: str, step: str, step_ratio: str, smaller: bool = True) -> str:
    """The closing sentences when the run without a cache wrote every token: all measured
    (`smaller`: the whole run's ratio is below the last step's, as the shared prefill makes it)."""
    why = ("the whole run's figure is smaller because both runs start with the same prefill and their "
           "first steps read short texts" if smaller else
           "at this length the two figures are within the noise of a few short steps")
    return (f" Both runs wrote all {n_cached} tokens, so nothing here is modelled: without a cache the whole "
            f"run took {run_ratio} the cached time (measured). The last step, step {step}, took {step_ratio} "
            f"as long without a cache (measured); {why}.")


TOO_FEW_STEPS = (" The run without a cache made no step after its prefill, which is the same work as the cached "
                 "run's: there is no step to compare yet and too few to model the rest. A longer output, or a "
                 "shorter prompt, gives it time for more steps.")


def race_opening(without: str, without_ms: str, cached: str, cached_ms: str) -> str:
    return (f"Both runs take turns on one device and each clock counts only its own steps. "
            f"Without a cache: {without} in {without_ms}; with it: {cached} in {cached_ms}.")


def race_longest() -> str:
    """The race caption at its longest (the estimate's sentences, figures at their widest): the
    panel reserves its height (kvviz.live.view_panel.race_caption_slot), so that no form of the caption,
    from a run's first step to its end, moves the panels below it."""
    wide = ["4,096 tokens", "59.99 min", "4,096 tokens", "999.9 ms"]
    return race_opening(*wide) + estimate_sentences(
        "4,096", "between ≈ 59.9 min and 59.9 min", "8,192", "4,096", "≈ 999.9×", "4,095", "999.9×",
        "4,096", "999.9×", "between 999.9× and 999.9×")


def race_caption(cached: list[StepEvent], recompute: list[StepEvent], final: bool) -> str:
    text = race_opening(tokens(len(recompute)), fmt_ms(sum(e.step_ms for e in recompute)),
                        tokens(len(cached)), fmt_ms(sum(e.step_ms for e in cached)))
    if not final:  # the estimate's sentences, to come: the panel keeps its lines through the run
        return text + ESTIMATE_TO_COME
    cost = no_cache_cost(cached, recompute)
    if cost is None:  # the run without a cache made no decode step: nothing to compare or fit
        return text + TOO_FEW_STEPS
    if cost.run_measured:
        return text + finished_sentences(str(len(cached)), fmt_run_ratio(cost), str(cost.step),
                                         fmt_ratio(cost.step_ratio),
                                         cost.run_low is None or cost.run_low < cost.step_ratio)
    est = race.estimate_total(cached, recompute, [e.seq_len - 1 for e in cached])
    if est is None:
        return text + TOO_FEW_STEPS
    n = min(len(cached), len(recompute))
    same_ms = sum(e.step_ms for e in cached[:n])
    same = sum(e.step_ms for e in recompute[:n]) / same_ms if same_ms > 0 else None
    return text + estimate_sentences(str(len(cached)), estimate_text(est), str(len(cached) + len(recompute)),
                                     str(len(recompute)), fmt_run_ratio(cost), str(cost.step),
                                     fmt_ratio(cost.step_ratio), str(n), fmt_ratio(same), fmt_run_range(cost))
