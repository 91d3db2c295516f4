"""The same prompt, greedy, with the full cache and with a shrunk one: plain-number step records.

A shrink mode is a kvpress press (evicts positions at the end of the prompt, kvviz.shrink.presses) or
transformers' quantized cache (kvviz.shrink.quant_cache). Decode steps pass explicit positions: after a
press the cache is shorter than the text, and 5.24 would otherwise take positions from the
cache's length. Bytes are read from the cache tensors after every step.

The two runs take turns on the one device, like the no-cache race (kvviz.engine.race): full step
0, shrunk step 0, full step 1, shrunk step 1, ... (`take_turns`), so each side's step times are
measured under the same load, and a page can fill both sides as they go. Each run has its own
cache and the press's hooks are on the model only inside the shrunk prefill, so the tokens are
the ones each run gives alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
from transformers import DynamicCache

from kvviz.engine import loop
from kvviz.engine.models import stop_token_ids
from kvviz.shrink import peak, presses, quant_cache, support
from kvviz.core.errors import UserError

FULL, SHRUNK = "full", "shrunk"

# The Shrink page's and `kvviz shrink`'s prompt: a context and a question, long enough (about 220
# tokens through SmolLM2's chat template) that SnapKV's observation window (presses.SNAPKV_WINDOW
# = 64 tokens) is shorter than the half it keeps at ratio 0.5, so its scores choose which earlier
# positions stay; on a prompt of 128 tokens or fewer the window is the half kept and a SnapKV run
# keeps just the most recent positions (tests/shrink/test_compute.py checks both on the default model).
DEFAULT_PROMPT = (
    "The lighthouse on Gull Rock was kept by Ada Morgan for thirty years. Every night she climbed the "
    "114 steps, trimmed the wick and wrote the weather in a green logbook. In winter the storms came "
    "from the west and the spray reached the lamp room; in summer the fog rolled in from the sea and "
    "she rang the bell every two minutes until it lifted. Ships passing the rock learned to read her "
    "lamp: two long flashes and one short. Her brother Tom rowed out from the harbour town of Penmor "
    "every Sunday with bread, oil and letters, and took her logbooks back to the harbour master. When "
    "the lighthouse was given an electric lamp in 1952, Ada moved to a cottage in Penmor, where she "
    "kept bees and painted the rock from her window. Her thirty green logbooks are now in the town "
    "museum.\n\nQuestion: in which year did the lighthouse get an electric lamp?")


@dataclass(frozen=True, kw_only=True)
class ShrinkMode:
    """What shrinks the cache: a press and ratio, or a quantized cache."""

    press: str = presses.NONE  # a name in presses.PRESSES, or "none"
    ratio: float = 0.5  # share of prompt positions the press evicts
    backend: str = ""  # "" (no quantization) or a quant_cache.BACKENDS key
    nbits: int = 4
    residual_length: int = 16
    question_aware: bool = False  # the sweep's leaderboard protocol: the question compressed with the context

    def check(self) -> None:
        """UserError in plain words for a mode kvviz cannot run (before any model is loaded)."""
        if self.backend:
            quant_cache.check(self.backend, self.nbits, self.residual_length)
        elif self.press != presses.NONE:
            presses.check(self.press, self.ratio)

    def label(self) -> str:
        if self.backend:
            bits = "" if self.backend == "fp8" else f" {self.nbits}-bit, residual {self.residual_length}"
            return f"quantized cache ({self.backend}{bits})"
        if self.press != presses.NONE:
            aware = ", question in the window" if self.question_aware else ""
            return f"{self.press} press, evicting {self.ratio * 100:g}%{aware}"
        return "full cache"


# The Shrink page's default press and ratio: one whose answer to DEFAULT_PROMPT visibly differs
# from the full cache's. Measured on the default model (fp32, greedy, answers stopped at the end of
# the turn; scripts/shrink_demo_candidates.py prints the whole table). The full cache answers
# "The lighthouse got an electric lamp in 1952." (14 tokens); so do StreamingLLM, SnapKV and TOVA
# at 0.25 and 0.5 (the old default, StreamingLLM 0.5, showed nothing) and ExpectedAttention at
# 0.25. What changes it: StreamingLLM 0.75 and 0.9 "… in 2022."; TOVA 0.75 "… electric light in
# 2022."; ExpectedAttention 0.5 "… in 1958."; SnapKV 0.75 keeps 1952 but repeats itself; Knorm at
# every ratio and everything at 0.9 lose the thread. Chosen: StreamingLLM 0.75, because its
# change is a plain wrong fact and its cause is visible on the kept map: it keeps the first 4
# positions and the newest 50 of 219 (169-218), so "1952" (positions 160-163) is evicted from every
# layer and head. SnapKV at the same ratio, which scores positions by the question's attention,
# keeps all four in every layer: the page offers it as the comparison (panel.suggestion).
DEMO_MODE = ShrinkMode(press="StreamingLLM", ratio=0.75)


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    step: int  # 0 = the prompt's forward (prefill)
    token_id: int
    kv_bytes: int  # measured from the cache tensors after this step
    step_ms: float
    payload_bytes: int = 0  # quantized cache only: packed values
    scale_bytes: int = 0  # quantized cache only: scales and zero points
    residual_bytes: int = 0  # quantized cache only: full-precision recent tokens
    peak_bytes: int = 0  # the step's peak of the tensors the run allocated (kvviz.shrink.peak); 0: not measured
    cuda_peak_bytes: int = 0  # CUDA only: the allocator's peak during the step (whole process)


@dataclass
class ShrinkRun:
    label: str
    steps: list[StepRecord] = field(default_factory=list)
    kept: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (kv_heads, kept) positions
    text: str = ""
    pieces: list[str] = field(default_factory=list)  # each new token's own text, for a replay's steps

    @property
    def tokens(self) -> list[int]:
        return [s.token_id for s in self.steps]

    def decode_ms(self) -> float:
        """Median decode step time (prefill excluded); 0 without decode steps."""
        times = sorted(s.step_ms for s in self.steps[1:])
        return times[len(times) // 2] if times else 0.0


def prompt_ids(tokenizer, prompt: str, chat: bool = True, answer_prefix: str = "") -> torch.Tensor:
    """(1, T) token ids of `prompt`, through the chat template when the tokenizer has one;
    `answer_prefix` starts the assistant's answer (as RULER's templates do)."""
    if not prompt.strip():
        raise UserError("the prompt is empty: type something for the model to continue")
    if chat and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
        return torch.tensor([tokenizer(text + answer_prefix, add_special_tokens=False)["input_ids"]])
    return torch.tensor([tokenizer(prompt + (" " + answer_prefix if answer_prefix else ""))["input_ids"]])


def context_limit(model) -> int | None:
    """The model's context in tokens (max_position_embeddings), None when the config has none."""
    return getattr(model.config.get_text_config(decoder=True), "max_position_embeddings", None)


def check_run(lm, prompt_tokens: int, max_new_tokens: int, mode: ShrinkMode) -> None:
    """UserError in plain words, before any run: the mode on this model, the new tokens, the
    prompt against the model's context (as `kvviz record` checks it) and a press's minimum."""
    mode.check()
    support.check(lm.model, mode)
    if max_new_tokens < 1:
        raise UserError("the number of new tokens must be at least 1")
    limit, total = context_limit(lm.model), prompt_tokens + max_new_tokens
    if limit and total > limit:
        raise UserError(f"prompt ({prompt_tokens:,} tokens) + new tokens ({max_new_tokens}) = {total:,} "
                        f"exceeds this model's context of {limit:,} tokens")
    if mode.press != presses.NONE and not mode.backend:
        presses.make_press(mode.press, mode.ratio, prompt_tokens)  # its own checks, nothing run


def dynamic_bytes(cache) -> int:
    return sum(t.nbytes for layer in cache.layers for t in (layer.keys, layer.values)
               if isinstance(t, torch.Tensor))


def make_cache(model, mode: ShrinkMode):
    if mode.backend:
        return quant_cache.make_cache(model.config, mode.backend, mode.nbits, mode.residual_length)
    return DynamicCache(config=model.config)


def record(step: int, token: int, cache, ms: float, memory: dict | None = None) -> StepRecord:
    """The step's measured figures: the cache's bytes now (its parts for a quantized cache), the
    time, and the step's peaks (`memory`: PeakTracker.step's dict)."""
    peaks = {"peak_bytes": 0, "cuda_peak_bytes": 0, **(memory or {})}
    if hasattr(cache.layers[0], "_quantized_keys"):
        q = quant_cache.measure(cache)
        return StepRecord(step=step, token_id=token, kv_bytes=q.kv_bytes, step_ms=ms, payload_bytes=q.payload_bytes,
                          scale_bytes=q.scale_bytes, residual_bytes=q.residual_bytes, **peaks)
    return StepRecord(step=step, token_id=token, kv_bytes=dynamic_bytes(cache), step_ms=ms, **peaks)


def stop_ids(lm) -> set[int]:
    """The tokens that end the model's answer (its EOS and the chat template's end of turn): a run
    stops after writing one, as the Live page's does (kvviz.engine.models.stop_token_ids)."""
    return set(stop_token_ids(lm.model, lm.tokenizer))


def greedy_run(lm, ids: torch.Tensor, max_new_tokens: int, mode: ShrinkMode, eos: set[int] | None = None):
    """Prefill (under the press, if any), then greedy decode steps; yields a StepRecord per step
    (bytes after the step, its time, its peak memory: kvviz.shrink.peak). The step that writes a
    token in `eos` is the last (empty or None: only max_new_tokens stops it)."""
    model, tracker = lm.model, peak.PeakTracker()
    prompt_len = ids.shape[1]
    with tracker.step(lm.device) as memory:
        cache = make_cache(model, mode)
        with loop.StepClock(lm.device) as clock:
            logits, kept = prefill(model, ids.to(lm.device), cache, mode)
    token = int(logits.argmax(-1))
    yield record(0, token, cache, clock.ms, memory), kept
    for step in range(1, max_new_tokens):
        if eos and token in eos:
            return
        with tracker.step(lm.device) as memory, loop.StepClock(lm.device) as clock:
            position = torch.tensor([[prompt_len + step - 1]], device=lm.device)
            logits = loop.forward(model, torch.tensor([[token]], device=lm.device), None, position, cache)
        token = int(logits.argmax(-1))
        yield record(step, token, cache, clock.ms, memory), kept


def prefill(model, ids: torch.Tensor, cache, mode: ShrinkMode):
    """The prompt's forward: (last logits, kept positions per layer or {})."""
    positions = torch.arange(ids.shape[1], device=ids.device)[None]
    if mode.press == presses.NONE or mode.backend:
        return loop.forward(model, ids, None, positions, cache), {}
    press = presses.make_press(mode.press, mode.ratio, ids.shape[1])
    with presses.pressed(model, press) as kept:
        logits = loop.forward(model, ids, None, positions, cache)
    return logits, kept.positions


def run(lm, ids: torch.Tensor, max_new_tokens: int, mode: ShrinkMode, eos: set[int] | None = None) -> ShrinkRun:
    """One greedy run, stopped at the end of the answer (`eos`; None: the model's `stop_ids`)."""
    check_run(lm, ids.shape[1], max_new_tokens, mode)
    out = ShrinkRun(mode.label())
    for step, kept in greedy_run(lm, ids, max_new_tokens, mode, stop_ids(lm) if eos is None else eos):
        out.steps.append(step)
        out.kept = kept
    out.text = lm.tokenizer.decode(out.tokens, skip_special_tokens=True)
    out.pieces = [lm.tokenizer.decode([t], skip_special_tokens=True) for t in out.tokens]
    return out


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile (q in 0..1) of a sorted, non-empty list."""
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """The first step whose tokens differ (a shorter run diverges where it stops); None if identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass
class Comparison:
    full: ShrinkRun
    shrunk: ShrinkRun
    diverged_at: int | None  # step (0 = first new token), None when identical

    def caption(self) -> str:
        if self.diverged_at is None:
            return f"identical: the {self.shrunk.label} gave the same {len(self.full.steps)} tokens"
        return f"diverged at token {self.diverged_at + 1}: from there the {self.shrunk.label} answers differently"

    def common_step(self) -> int:
        """The last step both runs made (one may end its answer before the other)."""
        return min(len(self.full.steps), len(self.shrunk.steps)) - 1

    def bytes_ratio(self) -> float:
        """Shrunk ÷ full cache bytes at the last step both made: the same number of tokens."""
        step = self.common_step()
        full, shrunk = self.full.steps[step].kv_bytes, self.shrunk.steps[step].kv_bytes
        return shrunk / full if full else 0.0

    def step_time_ratio(self) -> float:
        """The median of the paired decode steps' ratios (shrunk ÷ full); 0 without decode steps."""
        return self.step_time_spread()[0]

    def step_time_spread(self) -> tuple[float, float, float]:
        """(median, 25th, 75th percentile) of shrunk ÷ full over the decode steps, paired step by
        step (the two runs take turns, so each pair ran under the same load); zeros without steps."""
        ratios = sorted(b.step_ms / a.step_ms for a, b in zip(self.full.steps[1:], self.shrunk.steps[1:])
                        if a.step_ms > 0)
        if not ratios:
            return 0.0, 0.0, 0.0
        return quantile(ratios, 0.5), quantile(ratios, 0.25), quantile(ratios, 0.75)

    def timing_words(self) -> str:
        """"0.93 (0.85–1.02 over 23 steps): within noise"; "" without decode steps."""
        mid, lo, hi = self.step_time_spread()
        if not mid:
            return ""
        steps = min(len(self.full.steps), len(self.shrunk.steps)) - 1
        noise = ": within noise" if lo <= 1 <= hi else ""
        return f"{mid:.2f} (middle half {lo:.2f}–{hi:.2f} over {steps} decode steps){noise}"

    def first_difference_marked(self) -> tuple[str, str]:
        """Both answers as plain text with the first differing token between ⟦ ⟧ (as they are
        when identical or without per-token texts)."""
        d = self.diverged_at
        if d is None:
            return self.full.text, self.shrunk.text

        def mark(run: ShrinkRun) -> str:
            if not run.pieces:
                return run.text
            if d >= len(run.pieces):
                return "".join(run.pieces) + "⟦⟧"
            return "".join(run.pieces[:d]) + "⟦" + run.pieces[d] + "⟧" + "".join(run.pieces[d + 1:])
        return mark(self.full), mark(self.shrunk)

    def upto(self, steps: int) -> "Comparison":
        """The comparison as it stood after `steps` steps of each side (a replay's scrubber)."""
        def cut(run: ShrinkRun) -> ShrinkRun:
            done = steps >= len(run.steps)
            text = run.text if done or not run.pieces else "".join(run.pieces[:steps])
            return ShrinkRun(run.label, run.steps[:steps], run.kept, text, run.pieces[:steps])
        full, shrunk = cut(self.full), cut(self.shrunk)
        return Comparison(full, shrunk, first_divergence(full.tokens, shrunk.tokens))


@dataclass(frozen=True)
class Turn:
    """One step of one side: `side` is FULL or SHRUNK; `kept` the shrunk side's kept positions."""

    side: str
    step: StepRecord
    kept: dict


def take_turns(lm, ids: torch.Tensor, max_new_tokens: int, mode: ShrinkMode,
               should_stop: Callable[[], bool] | None = None, eos: set[int] | None = None) -> Iterator[Turn]:
    """The full and the shrunk runs, one step each in turn: full 0, shrunk 0, full 1, shrunk 1, ...

    Each side stops after the token that ends its answer (`eos`; None: `stop_ids`, the model's EOS
    and its chat template's end of turn), so neither runs on into a turn the model invents
    ("system", "user"); the other goes on alone. An empty `eos` runs both to max_new_tokens (a
    benchmark's fixed length). `should_stop` is asked before every step after the first (both prompts always
    run): when it says so, both sides stop. UserError before any step for a request `check_run`
    refuses."""
    check_run(lm, ids.shape[1], max_new_tokens, mode)
    eos = stop_ids(lm) if eos is None else eos
    sides = {FULL: greedy_run(lm, ids, max_new_tokens, ShrinkMode(), eos),
             SHRUNK: greedy_run(lm, ids, max_new_tokens, mode, eos)}
    running = dict(sides)
    try:
        for step in range(max_new_tokens):
            if step and should_stop is not None and should_stop():
                return
            for side, steps in list(running.items()):
                turn = next(steps, None)
                if turn is None:  # this side wrote its end of turn last step
                    del running[side]
                    continue
                yield Turn(side, *turn)
            if not running:
                return
    finally:
        for steps in sides.values():
            steps.close()


def new_pair(mode: ShrinkMode) -> dict[str, ShrinkRun]:
    return {FULL: ShrinkRun(ShrinkMode().label()), SHRUNK: ShrinkRun(mode.label())}


def add_turn(runs: dict[str, ShrinkRun], turn: Turn, tokenizer) -> ShrinkRun:
    """Append `turn` to its side's run (its text decoded so far); returns that run."""
    out = runs[turn.side]
    out.steps.append(turn.step)
    out.kept = turn.kept
    out.text = tokenizer.decode(out.tokens, skip_special_tokens=True)
    out.pieces.append(tokenizer.decode([turn.step.token_id], skip_special_tokens=True))
    return out


def comparison(runs: dict[str, ShrinkRun]) -> Comparison:
    full, shrunk = runs[FULL], runs[SHRUNK]
    return Comparison(full, shrunk, first_divergence(full.tokens, shrunk.tokens))


def compare(lm, ids: torch.Tensor, max_new_tokens: int, mode: ShrinkMode,
            should_stop: Callable[[], bool] | None = None, eos: set[int] | None = None) -> Comparison:
    """Both runs, taking turns step by step (`take_turns`), each to the end of its answer."""
    runs = new_pair(mode)
    for turn in take_turns(lm, ids, max_new_tokens, mode, should_stop, eos):
        add_turn(runs, turn, lm.tokenizer)
    return comparison(runs)
