"""The engine measured headless: hook overhead, engine vs `model.generate`, recompute vs cached."""
from __future__ import annotations

import statistics
import time
from contextlib import nullcontext
from dataclasses import dataclass

from bench.results import Result, interleaved, medians, spread
from bench.settings import Settings


def bench_config(new_tokens: int):
    """The greedy run every benchmark uses: the default short prompt, never stopping early at EOS."""
    from kvviz.core.config import RunConfig
    return RunConfig(max_new_tokens=new_tokens, stop_on_eos=False)


def sync(device) -> None:
    if device.type == "cuda":
        import torch
        torch.cuda.synchronize(device)


class BareDecodeLoop:
    """The engine's own `prefill` and `decode_step`, greedy, and nothing else the engine does
    per step (cache probe, block accounting, text, events); `step_ms` times one decode step."""

    def __init__(self, lm, cfg):
        from kvviz.engine import loop as engine
        from kvviz.core import layout
        from kvviz.engine.hooks import find_decoder_layers
        self.lm, self.engine = lm, engine
        self.batch = engine.encode_prompts(lm.tokenizer, cfg, lm.device)
        self.cache = engine.make_cache(lm.model, "dynamic", self.batch.prompt_len + cfg.max_new_tokens)
        self.layers = find_decoder_layers(lm.model, len(layout.layer_specs(lm.model.config)))
        self.next_ids = engine.prefill(lm.model, self.batch, self.cache).argmax(-1)  # (B,)

    def step_ms(self, hooked: bool) -> float:
        """One decode step, with the engine's layer-timing hooks installed or not.

        Hooks go on before the clock starts and come off after it stops; reading the layer
        times (`take_ms`, which the engine does every step) is inside the clock.
        """
        import torch
        from kvviz.engine.hooks import timed_layers
        column = self.next_ids[:, None]  # (B, 1)
        self.batch.ids = torch.cat([self.batch.ids, column], dim=1)
        self.batch.mask = torch.cat([self.batch.mask, torch.ones_like(column)], dim=1)
        hooks = timed_layers(self.layers, self.lm.device.type == "cuda") if hooked else nullcontext()
        with hooks as timer:
            start = time.perf_counter()
            self.next_ids = self.engine.decode_step(self.lm.model, self.batch, self.cache).argmax(-1)
            sync(self.lm.device)
            if timer is not None:
                timer.take_ms()
            return (time.perf_counter() - start) * 1e3


@dataclass(frozen=True)
class RunTiming:
    """One generation seen from outside: its decode pace and its whole duration."""

    step_ms: float  # median wall time between consecutive decode tokens
    total_s: float  # the whole call: tokenization, prefill and every decode step
    tokens: int  # new tokens per sequence

    @property
    def decode_tokens_per_s(self) -> float:
        return 1e3 / self.step_ms

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.total_s


def run_timing(stamps: list[float], start: float, end: float) -> RunTiming:
    """From the moments each new token became available (the first one ends the prefill)."""
    gaps = [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]
    return RunTiming(statistics.median(gaps), end - start, len(stamps))


def engine_timing(lm, cfg) -> RunTiming:
    """`kvviz.engine.loop.generate`, stamped each time it yields an event."""
    from kvviz.engine import loop as engine
    start, stamps = time.perf_counter(), []
    for _ in engine.generate(lm, cfg):
        stamps.append(time.perf_counter())
    return run_timing(stamps, start, time.perf_counter())


class StampLogits:
    """A logits processor that only notes when each step's logits arrive."""

    def __init__(self):
        self.stamps: list[float] = []

    def __call__(self, input_ids, scores):
        self.stamps.append(time.perf_counter())
        return scores


def hf_generate_timing(lm, cfg) -> RunTiming:
    """`model.generate` (greedy, exactly max_new_tokens), same prompt, stamped each step."""
    from transformers import LogitsProcessorList
    from kvviz.engine import loop as engine
    start, stamp = time.perf_counter(), StampLogits()
    batch = engine.encode_prompts(lm.tokenizer, cfg, lm.device)
    lm.model.generate(input_ids=batch.ids, attention_mask=batch.mask, do_sample=False,
                      max_new_tokens=cfg.max_new_tokens, min_new_tokens=cfg.max_new_tokens,
                      pad_token_id=lm.tokenizer.pad_token_id, logits_processor=LogitsProcessorList([stamp]))
    sync(lm.device)
    return run_timing(stamp.stamps, start, time.perf_counter())


def generate_s(lm, cfg, mode: str) -> float:
    """Wall seconds of one whole engine run in `mode` ("cached" or "recompute")."""
    from kvviz.engine import loop as engine
    start = time.perf_counter()
    for _ in engine.generate(lm, cfg, mode):
        pass
    return time.perf_counter() - start


def hook_overhead(lm, s: Settings, label: str | None = None) -> tuple[list[Result], str]:
    """`label`: the model, in the row's name, when it is not the default model."""
    cfg = bench_config(2 * s.new_tokens + 2)
    samples: dict[str, list[float]] = {"hooked": [], "bare": []}
    for _ in range(s.reps):
        loop = BareDecodeLoop(lm, cfg)
        variants = {"hooked": lambda: loop.step_ms(True), "bare": lambda: loop.step_ms(False)}
        interleaved(variants, 1)  # warm-up pair, discarded
        for name, values in interleaved(variants, s.new_tokens).items():
            samples[name] += values
    m = medians(samples)
    row = Result(f"Hook overhead: decode step, hooked / un-hooked{f' ({label})' if label else ''}",
                 f"{m['hooked']:.2f} ms", f"{m['bare']:.2f} ms", m["hooked"] / m["bare"], "<=", 1.03)
    return [row], (
        "A bare greedy loop (`BareDecodeLoop` in `bench/engine_runs.py`) runs the engine's own `prefill` "
        "and `decode_step` and nothing else. Its decode steps alternate one by one (A, B, A, B, …) "
        "between having `kvviz.engine.hooks.timed_layers` installed on every decoder layer — reading the "
        "layer times after the step, as the engine does — and having no hooks; so both variants "
        "see the same sequence lengths and the same background load, step for step. "
        f"{s.reps} loops of {s.new_tokens} steps per variant (after one discarded pair each); the "
        "ratio is of the median step. "
        f"Hooked: {spread(samples['hooked'])} ms; un-hooked: {spread(samples['bare'])} ms.")


def engine_vs_generate(lm, s: Settings) -> tuple[list[Result], str]:
    cfg = bench_config(s.new_tokens)
    variants = {"engine": lambda: engine_timing(lm, cfg), "generate": lambda: hf_generate_timing(lm, cfg)}
    interleaved(variants, 1)  # warm-up round, discarded
    runs = interleaved(variants, s.reps)
    pace = {name: [t.decode_tokens_per_s for t in timings] for name, timings in runs.items()}
    whole = {name: [t.tokens_per_s for t in timings] for name, timings in runs.items()}
    m = medians(pace)
    row = Result("Engine / `model.generate` decode tokens/s", f"{m['engine']:.2f} tok/s",
                 f"{m['generate']:.2f} tok/s", m["engine"] / m["generate"], ">=", 0.95)
    w = medians(whole)
    return [row], (
        f"`kvviz.engine.loop.generate` (every event built: cache probe, block accounting, layer hooks, "
        f"text) against `model.generate(do_sample=False, max_new_tokens={s.new_tokens}, "
        f"min_new_tokens={s.new_tokens})` on the same chat-templated prompt, EOS ignored so both "
        f"produce exactly {s.new_tokens} tokens; {s.reps} interleaved rounds after a warm-up round. "
        "Each run is stamped when each new token becomes available (when the engine yields its "
        "event; for `generate`, a logits processor that only reads the clock), and its decode "
        "tokens/s is 1000 / the median gap between stamps, which a burst of load from other "
        "processes cannot move much. Engine: "
        f"{spread(pace['engine'])} tok/s; generate: {spread(pace['generate'])} tok/s. Over whole "
        f"calls (tokenization and prefill included) the medians were {w['engine']:.2f} vs "
        f"{w['generate']:.2f} tok/s (ratio {w['engine'] / w['generate']:.3f}), noisier on a shared "
        "machine.")


def recompute_vs_cached(lm, s: Settings) -> tuple[list[Result], str]:
    rows, notes = [], []
    for n in s.recompute_lengths:
        cfg = bench_config(n)
        samples = interleaved({"recompute": lambda: generate_s(lm, cfg, "recompute"),
                               "cached": lambda: generate_s(lm, cfg, "cached")}, s.recompute_reps)
        m = medians(samples)
        rows.append(Result(f"Recompute / cached total time, {n} new tokens", f"{m['recompute']:.2f} s",
                           f"{m['cached']:.2f} s", m["recompute"] / m["cached"], ">", 1.0))
        notes.append(f"{n} tokens: recompute {spread(samples['recompute'])} s, cached "
                     f"{spread(samples['cached'])} s")
    first, last = rows[0], rows[-1]
    rows.append(Result(f"Growth of that ratio, {s.recompute_lengths[-1]} vs {s.recompute_lengths[0]} "
                       "new tokens", f"{last.ratio:.2f}×", f"{first.ratio:.2f}×",
                       last.ratio / first.ratio, ">", 1.0))
    return rows, (
        "The engine's two modes, same greedy run, same prompt: `recompute` feeds the whole sequence "
        "every step with `use_cache=False`; `cached` feeds one token and the cache. Total = wall "
        f"time of the whole run (prefill included), {s.recompute_reps} interleaved round(s) per "
        "length. A recompute step costs time roughly proportional to the sequence so far while a "
        "cached step stays nearly flat, so recompute's total grows like n² against cached's n and "
        "the ratio must grow with n — though more slowly than n while the fixed cost of a "
        "step (30 layers of small kernels, Python) outweighs the length-dependent part, as it "
        "does at these lengths on a CPU. The last row checks that growth between the shortest "
        "and the longest run (adjacent lengths are too close to order reliably on a busy "
        "machine). " + "; ".join(notes) + ".")
