"""The guided tour of a live run, for people who have never heard of a KV cache. Pure.

Five short steps that point at what is happening as it happens: the prompt read at once (the
prefill), one new column per token in every layer of the cache map, the no-cache run falling
behind, what the cache costs at 128k tokens on a real GPU (a link into the Capacity planner) and
what shrinking it costs the answer (a link into Shrink). Every number is read from the run's
events and its trace meta; a step is `ready` once the run has reached it.

Which step shows (kvviz.live.tour_panel draws it): while the run goes on, the tour moves on by
itself, one step at a time, to the furthest ready step, but never sooner than `MIN_READ_S` after
the last move, so that each step can be read; once a presenter presses Next or Back, theirs.
"""
from __future__ import annotations

from dataclasses import dataclass

from kvviz.app import links
from kvviz.core import catalog
from kvviz.core.events import StepEvent
from kvviz.core.meta import RunMeta
from kvviz.core.units import fmt_bytes, fmt_ms
from kvviz.live import captions

LONG_CONTEXT = 131_072  # "128k tokens": a long document or a long chat
PLAN_GPU = "H100 SXM"  # a real serving GPU the planner knows (assets/gpus.json)
PLAN_KV_DTYPE = "bf16"  # how a GPU usually keeps the cache (the planner's own default)
BF16_BYTES = 2
PLANNER_PAGE, SHRINK_PAGE = "planner", "shrink"  # relative: they work under any base URL path
MIN_READ_S = 5.0  # the shortest time a step stays up before the tour moves on by itself


@dataclass(frozen=True)
class TourStep:
    title: str
    text: str  # plain sentences: drawn Markdown-inert
    link_label: str | None = None
    link_url: str | None = None
    ready: bool = False  # the run has reached this step (its numbers are there)


def steps(meta: RunMeta, cached: list[StepEvent], recompute: list[StepEvent] | None,
          ended: bool = False) -> list[TourStep]:
    """The tour's steps for the run so far. `recompute` None: the no-cache race is off.
    `ended`: the run is over (finished or stopped); the last two steps wait for it."""
    return [prefill_step(meta, cached), columns_step(meta, cached), race_step(cached, recompute),
            long_context_step(meta, cached, ended), shrink_step(cached, ended)]


def prefill_step(meta: RunMeta, cached: list[StepEvent]) -> TourStep:
    title = "1 · The prompt is read all at once"
    prefill = next((e for e in cached if e.phase == "prefill"), None)
    if prefill is None:
        return TourStep(title, f"The model is reading the prompt: {meta.prompt_tokens:,} tokens "
                               "(pieces of words), all in one pass.")
    copies = f", for each of the {meta.batch} copies" if meta.batch > 1 else ""
    return TourStep(title, (
        f"The model read the whole prompt, {meta.prompt_tokens:,} tokens (pieces of words), in one "
        f"pass: {fmt_ms(prefill.step_ms)}, measured{copies}. This first pass is called the prefill. "
        "While reading, every layer kept two small vectors per token, a key and a value, so that it "
        f"never has to read those tokens again: that store is the KV cache, {fmt_bytes(prefill.kv_bytes)} "
        "right after the prefill."), ready=True)


def bytes_per_token(meta: RunMeta, cached: list[StepEvent]) -> tuple[float, bool]:
    """(bytes one new token adds per sequence, measured?): the newest growth between two cached
    steps; without a measured growth, the model's layout (meta) says it."""
    for before, after in zip(reversed(cached[:-1]), reversed(cached[1:])):
        grown = after.kv_bytes - before.kv_bytes
        if grown > 0 and after.seq_len > before.seq_len:
            return grown / len(after.token_ids) / (after.seq_len - before.seq_len), True
    return float(meta.bytes_per_token or 0), False


def columns_step(meta: RunMeta, cached: list[StepEvent]) -> TourStep:
    title = "2 · One new column per token, in every layer"
    decode = [e for e in cached if e.phase == "decode"]
    if not decode:
        return TourStep(title, "Next the model writes its answer one token at a time.")
    per_token, measured = bytes_per_token(meta, cached)
    last = cached[-1]
    how = "measured over the last step" if measured else "from the model's layout"
    return TourStep(title, (
        f"Now the model writes one token at a time. Each new token adds one column to every one of "
        f"the {meta.num_layers} layers in the cache map: {fmt_bytes(per_token)} per token "
        f"({how}). Nothing stored is computed again: each step reads the cache and adds to it, "
        f"{fmt_ms(last.step_ms)} for the last one. The cache now holds {fmt_bytes(last.kv_bytes)} "
        f"for {last.seq_len:,} tokens{' per sequence' if len(last.token_ids) > 1 else ''}."),
        ready=True)


def race_step(cached: list[StepEvent], recompute: list[StepEvent] | None) -> TourStep:
    title = "3 · Without a cache, the model falls behind"
    if recompute is None:
        return TourStep(title, (
            "The no-cache race is off for this run. Turn on \"Race a no-cache run\" in the sidebar "
            "to watch a run that keeps no cache write the same text beside this one, and fall "
            "further behind with every token."), ready=any(e.phase == "decode" for e in cached))
    cost = captions.no_cache_cost(cached, recompute)
    figure = None if cost is None else captions.fmt_run_ratio(cost)
    if figure is None or figure == "–":
        return TourStep(title, "Beside it, a run that keeps no cache writes the same text.")
    positions = recompute[-1].positions // max(len(recompute[-1].token_ids), 1)
    return TourStep(title, (
        "The run beside it keeps no cache: for each new token it reads the whole text again (its latest "
        f"step read all {positions:,} positions; the cached run reads one). Over the whole run that takes "
        f"{figure} the time with the cache ({whole_run_basis(cost)}). In the same time it has written "
        f"{len(recompute):,} tokens to the cached run's {len(cached):,}."), ready=True)


def whole_run_basis(cost: captions.NoCacheCost) -> str:
    """How the race step's whole-run figure (the page's headline figure, `captions.fmt_run_ratio`)
    was found, in plain words."""
    if cost.run_measured:
        return "measured"
    spread = captions.fmt_run_range(cost)
    return f"modelled: the steps it has not made are estimated from its measured ones{', ' + spread if spread else ''}"


def long_context_step(meta: RunMeta, cached: list[StepEvent], ended: bool) -> TourStep:
    title = "4 · What this costs at 128k tokens on a real GPU"
    per_token, _ = bytes_per_token(meta, cached)
    if not cached or not per_token:
        return TourStep(title, "How much memory would a long conversation take? The numbers come "
                               "once the run is over.", *planner_link(meta))
    elem = meta.elem_bytes or BF16_BYTES
    in_bf16 = ("" if elem == BF16_BYTES else
               f" ({fmt_bytes(per_token * LONG_CONTEXT * BF16_BYTES / elem)} in bf16, as a GPU "
               "usually keeps it)")
    return TourStep(title, (
        f"At {fmt_bytes(per_token)} per token, a conversation of {LONG_CONTEXT:,} tokens (128k: a "
        f"long document, or a long chat) needs {fmt_bytes(per_token * LONG_CONTEXT)} of cache "
        f"for itself alone{in_bf16}, on top of the model's weights. A GPU serves many conversations "
        f"at once: the Capacity planner works out how many fit on an {PLAN_GPU} at that length."),
        *planner_link(meta), ready=ended)


def planner_model(meta: RunMeta) -> str | None:
    """The planner's catalog name for the running model (None: not in its catalog)."""
    entry = catalog.find_catalog_entry(meta.model or "")
    return entry["name"] if entry else None


def planner_link(meta: RunMeta) -> tuple[str, str]:
    """(label, relative URL) of the Capacity planner at 128k tokens on PLAN_GPU, with the running
    model where the planner's catalog has it (else the planner's own default model)."""
    name = planner_model(meta)
    pairs = ([("plan_source", "Catalog"), ("plan_model", name)] if name else []) + [
        ("plan_gpu", PLAN_GPU), ("plan_kv_dtype", PLAN_KV_DTYPE), ("plan_context", str(LONG_CONTEXT))]
    label = f"Capacity planner: {name or 'a model'} at 128k tokens"
    return label, f"{PLANNER_PAGE}?{links.encode(pairs)}"


def shrink_step(cached: list[StepEvent], ended: bool) -> TourStep:
    title = "5 · Shrinking the cache can change the answer"
    label, url = "Shrink: a full and a shrunk cache", SHRINK_PAGE
    if not cached:
        return TourStep(title, "The cache can be made smaller, at a price.", label, url)
    held = cached[-1].kv_bytes
    return TourStep(title, (
        f"This run's cache ended at {fmt_bytes(held)}. Keeping only half of it would free "
        f"{fmt_bytes(held / 2)}, but what is dropped can no longer be read: the answer may change. "
        "The Shrink page runs a prompt twice, with the full cache and with one that drops positions "
        "or stores them in fewer bits, and shows where the two answers part."), label, url,
        ready=ended)


def furthest_ready(tour: list[TourStep]) -> int | None:
    return max((i for i, s in enumerate(tour) if s.ready), default=None)


def auto_index(tour: list[TourStep], shown: int | None, shown_for_s: float, ended: bool,
               min_read_s: float = MIN_READ_S) -> int:
    """The step to show while nobody presses Next or Back: the first step to begin with; while
    the run goes on, one step further towards the furthest ready step once the shown one has
    been up `min_read_s`; once the run is over, the shown step stays (Next walks on)."""
    if shown is None:
        return 0
    furthest = furthest_ready(tour)
    if ended or furthest is None or furthest <= shown or shown_for_s < min_read_s:
        return shown
    return shown + 1


def moved(tour: list[TourStep], shown: int, delta: int) -> int:
    """The step Next (+1) or Back (-1) goes to: the next ready step that way, else where it is."""
    index = shown + delta
    while 0 <= index < len(tour):
        if tour[index].ready:
            return index
        index += delta
    return shown
