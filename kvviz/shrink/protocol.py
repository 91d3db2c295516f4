"""The kvpress leaderboard's protocol: compress the context only, then feed the question.

This is what kvpress's own `KVPressTextGenerationPipeline` (kvpress/pipeline.py, 0.5.5) does, and
how the kvpress leaderboard scores presses on RULER:

1. `split`: the chat template is applied to the context followed by a separator and cut there.
   The context ids are the template's start and the context; the question ids are the question,
   the template's end of the user turn and start of the answer, and the answer's start.
2. `prefill`: the context alone runs through the model (`model.model`, no LM head) with the press
   on it: the press compresses the cache once, after the context.
3. `steps`: the question is fed at the positions that follow the *uncompressed* context (a press
   removes rows, not positions), then greedy decoding until an end token or max_new_tokens.

Including the question in what is compressed "would artificially favor methods such as SnapKV"
(kvpress's README); the leaderboard reports that variant as separate, "query-aware" entries
(kvpress's evaluation: `compress_questions`, the question appended to the context). Here that is
`question_aware=True` on the prompt, a setting of its own in the sweep.

Head-wise presses (AdaKV, KVzip) leave, on each attention module, the positions each head may no
longer read (`masked_key_indices`, used by kvpress's attention patch on every later forward);
`masks` / `masked` read and set them so each run starts and ends with none left behind.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch
from transformers import DynamicCache

from kvviz.engine import loop
from kvviz.shrink import presses, quant_cache

PROTOCOL = ("the kvpress leaderboard's: the context alone is compressed, then the question is fed "
            "(KVPressTextGenerationPipeline)")
QUESTION_AWARE = "question-aware: the question compressed with the context (the leaderboard's query-aware entries)"


@dataclass(frozen=True)
class Prompt:
    """A context and a question, tokenized as kvpress's pipeline tokenizes them."""

    context_ids: torch.Tensor  # (1, C) the chat template's start + the context (+ the question, question-aware)
    question_ids: torch.Tensor  # (1, Q) the question + the template's start of the answer + the answer's start

    @property
    def context_tokens(self) -> int:
        return self.context_ids.shape[1]


def split(tokenizer, context: str, question: str, answer_prefix: str = "", question_aware: bool = False) -> Prompt:
    """kvpress's `KVPressTextGenerationPipeline.preprocess`, token for token (no truncation)."""
    if question_aware:
        context, question = context + question, ""
    if getattr(tokenizer, "chat_template", None) is None:
        context, suffix = (getattr(tokenizer, "bos_token", "") or "") + context, "\n"
    else:
        separator = "#" * (len(context) + 10)
        text = tokenizer.apply_chat_template([{"role": "user", "content": context + separator}],
                                             add_generation_prompt=True, tokenize=False, enable_thinking=False)
        context, suffix = text.split(separator)
    encode = lambda s: tokenizer.encode(s, return_tensors="pt", add_special_tokens=False)  # noqa: E731
    return Prompt(encode(context), encode(question + suffix + answer_prefix))


def item_prompt(tokenizer, item, question_aware: bool = False) -> Prompt:
    """A task item (kvviz.shrink.task.TaskItem) as the leaderboard feeds it."""
    return split(tokenizer, item.context, item.question, item.answer_prefix, question_aware)


# ------------------------------------------------------------------ head-wise masks
def attention_modules(model) -> list:
    return [layer.self_attn for layer in model.model.layers]


def masks(model) -> dict[int, tuple]:
    """layer -> the (batch, head, position) indices a head-wise press masked; {} when none."""
    return {i: m.masked_key_indices for i, m in enumerate(attention_modules(model))
            if getattr(m, "masked_key_indices", None) is not None}


def clear_masks(model) -> None:
    for m in attention_modules(model):
        m.masked_key_indices = None


@contextmanager
def masked(model, layer_masks: dict[int, tuple]):
    """While inside, each attention module holds `layer_masks`' indices (the others none)."""
    clear_masks(model)
    try:
        for i, m in enumerate(attention_modules(model)):
            m.masked_key_indices = layer_masks.get(i)
        yield
    finally:
        clear_masks(model)


def masked_count(layer_masks: dict[int, tuple]) -> int:
    return sum(len(idx[0]) for idx in layer_masks.values())


# ------------------------------------------------------------------ the context, under the press
def new_cache(model, mode):
    if mode.backend:
        return quant_cache.make_cache(model.config, mode.backend, mode.nbits, mode.residual_length)
    return DynamicCache(config=model.config)


def run_context(model, ids: torch.Tensor, cache) -> None:
    """The context's forward as kvpress runs it: `model.model(input_ids=..., past_key_values=...)`
    (KVzip reads the cache under that name; 5.24 takes it with a deprecation notice)."""
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model.model(input_ids=ids, past_key_values=cache)


def prefill(lm, context_ids: torch.Tensor, mode) -> tuple:
    """The context, compressed by `mode` (a compute.ShrinkMode): (cache, its head-wise masks).
    The masks are read off the modules and cleared: `steps` sets them again."""
    model, ids = lm.model, context_ids.to(lm.device)
    cache = new_cache(model, mode)
    clear_masks(model)
    if mode.press == presses.NONE or mode.backend:
        run_context(model, ids, cache)
        return cache, {}
    press = presses.shim(presses.make_press(mode.press, mode.ratio, ids.shape[1]))
    with torch.inference_mode(), press(model):  # (KVzip's replay runs as the context manager exits)
        run_context(model, ids, cache)
    found = masks(model)
    clear_masks(model)
    return cache, found


# ------------------------------------------------------------------ the question, then the answer
@dataclass
class Step:
    token_id: int
    step_ms: float  # step 0: the question's forward


@dataclass
class Answer:
    """One setting's answer to one item, with the figures measured on the way."""

    tokens: list[int] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)
    text: str = ""
    kv_bytes: int = 0  # the cache after the context, before the question (measured from its tensors)
    kept_share: float = 1.0  # share of (layer, head, context position) a query can still attend to


def cache_bytes(cache) -> int:
    """Bytes the cache holds now, from its tensors (a quantized cache: payload, scales, residual)."""
    if cache.layers and hasattr(cache.layers[0], "_quantized_keys"):
        return quant_cache.measure(cache).kv_bytes
    return sum(t.nbytes for layer in cache.layers for t in (layer.keys, layer.values) if isinstance(t, torch.Tensor))


def kept_share(cache, layer_masks: dict, context_tokens: int) -> float:
    """Share of (layer, KV head, context position) left for attention: rows kept, less masked."""
    layers = [layer for layer in cache.layers if isinstance(getattr(layer, "keys", None), torch.Tensor)
              and layer.keys.dim() == 4 and layer.keys.numel()]
    if not layers or not context_tokens:
        return 1.0  # a quantized cache keeps every position (in fewer bits)
    heads = layers[0].keys.shape[1]
    total = len(cache.layers) * heads * context_tokens
    rows = sum(layer.keys.shape[1] * layer.keys.shape[2] for layer in layers)
    return round((rows - masked_count(layer_masks)) / total, 6)


def steps(lm, cache, prompt: Prompt, max_new_tokens: int, eos: set[int],
          layer_masks: dict | None = None) -> Iterator[Step]:
    """The question's forward, then greedy decode steps on `cache` (kvpress's `generate_answer`):
    positions continue from the uncompressed context; the step that writes a token in `eos` is the
    last. `layer_masks` are on the attention modules while each step runs (and cleared after)."""
    model, start = lm.model, prompt.context_tokens
    ids = prompt.question_ids.to(lm.device)
    positions = torch.arange(start, start + ids.shape[1], device=lm.device)[None]
    for n in range(max_new_tokens):
        with masked(model, layer_masks or {}), loop.StepClock(lm.device) as clock:
            token = int(loop.forward(model, ids, None, positions, cache).argmax(-1))
        yield Step(token, clock.ms)
        if token in eos:
            return
        ids = torch.tensor([[token]], device=lm.device)
        positions = positions[:, -1:] + 1


def finish(lm, out: Answer, taken: list[Step]) -> Answer:
    out.tokens = [s.token_id for s in taken]
    out.step_ms = [s.step_ms for s in taken]
    out.text = lm.tokenizer.decode(out.tokens, skip_special_tokens=True)
    return out


def answer(lm, prompt: Prompt, mode, max_new_tokens: int, eos: set[int]) -> Answer:
    """One setting on one prompt, as kvpress's pipeline runs it: its own prefill, its answer."""
    cache, layer_masks = prefill(lm, prompt.context_ids, mode)
    out = Answer(kv_bytes=cache_bytes(cache), kept_share=kept_share(cache, layer_masks, prompt.context_tokens))
    return finish(lm, out, list(steps(lm, cache, prompt, max_new_tokens, eos, layer_masks)))
