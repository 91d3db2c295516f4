"""NVIDIA kvpress presses on transformers 5.24: the one adapter, the presses offered, kept positions.

kvpress 0.5.5 (installed --no-deps; it declares transformers<5.3) hooks every attention layer
and, after the prompt's forward, replaces that layer's keys/values with the ones it keeps. Its
hook reads `kwargs["past_key_values"]` and `kwargs["cache_position"]`; 5.24 passes the cache as
`cache` and no longer passes positions. `adapt` supplies both (positions: the last q_len of the
layer's length). The press keeps tokens in score order (its `topk`), not position order, so the
score is recorded per layer to give back the kept positions, per KV head.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from kvviz.core.errors import UserError

# name -> (kvpress class, one plain sentence on what it keeps and why)
PRESSES = {
    "StreamingLLM": ("StreamingLLMPress", "Keeps the first 4 tokens (the 'attention sinks' every "
                     "head leans on) and the most recent ones, and drops the middle, whatever it said."),
    "SnapKV": ("SnapKVPress", "Keeps the tokens the last 64 prompt tokens (usually the question) "
               "attend to most, so the words the question points at survive."),
    "Knorm": ("KnormPress", "Keeps the tokens whose keys are shortest (a short key tends to draw "
              "more attention), without looking at the question at all."),
    "ExpectedAttention": ("ExpectedAttentionPress", "Keeps the tokens that future queries are "
                          "expected to attend to, estimated from the statistics of recent queries."),
    "TOVA": ("TOVAPress", "Keeps the tokens the last prompt token attends to most, per head."),
}
NONE = "none"
MIN_PROMPT_TOKENS = 8  # fewer leave a press nothing to choose between
SNAPKV_WINDOW = 64  # kvpress's default observation window (tokens at the end of the prompt)


def kvpress_module():
    """kvpress, imported on first use (≈ 1 s over transformers; it imports `datasets`)."""
    import kvpress
    return kvpress


def offered() -> tuple[dict[str, str], dict[str, str]]:
    """({name: sentence} for presses that can run here, {name: why not} for the others)."""
    try:
        module = kvpress_module()
    except Exception as exc:  # noqa: BLE001 - any import failure means no presses, said plainly
        return {}, {name: f"kvpress does not import: {exc}" for name in PRESSES}
    ok, refused = {}, {}
    for name, (cls, sentence) in PRESSES.items():
        if hasattr(module, cls):
            ok[name] = sentence
        else:
            refused[name] = f"kvpress {module.__name__} has no {cls}"
    return ok, refused


def check(name: str, ratio: float) -> None:
    """ValueError in plain words for a press kvviz does not offer or a ratio outside (0, 1)."""
    if name not in PRESSES:
        raise UserError(f"unknown press {name!r}: pick one of {', '.join(PRESSES)}")
    if not 0 < ratio < 1:
        raise UserError(f"the compression ratio is {ratio}; it must be above 0 and below 1")


def make_press(name: str, ratio: float, prompt_tokens: int):
    """A kvpress press that evicts `ratio` of the prompt's positions; ValueError in plain words."""
    check(name, ratio)
    if prompt_tokens < MIN_PROMPT_TOKENS:
        noun = "token" if prompt_tokens == 1 else "tokens"
        raise UserError(f"the prompt is {prompt_tokens} {noun}; a press needs at least {MIN_PROMPT_TOKENS} "
                        "to choose from")
    cls = getattr(kvpress_module(), PRESSES[name][0])
    if name == "SnapKV":  # its window must be shorter than the prompt
        return cls(compression_ratio=ratio, window_size=min(SNAPKV_WINDOW, prompt_tokens // 2))
    return cls(compression_ratio=ratio)


@dataclass
class Kept:
    """Positions each layer kept: layer -> (kv_heads, kept) LongTensor, sorted per head."""

    positions: dict[int, torch.Tensor] = field(default_factory=dict)
    prompt_tokens: int = 0


def adapt(press, kept: Kept):
    """Make `press` run on 5.24 and record what it keeps (patches this press instance only)."""
    hook, score = press.forward_hook, press.score
    current = {}

    def forward_hook(module, args, kwargs, output):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        q_len = kwargs["hidden_states"].shape[1]
        length = cache.layers[module.layer_idx].get_seq_length()
        device = kwargs["hidden_states"].device
        current["layer"] = module.layer_idx
        kw = dict(kwargs, past_key_values=cache, cache_position=torch.arange(length - q_len, length, device=device))
        return hook(module, args, kw, output)

    def recorded_score(module, hidden_states, keys, values, attentions, kwargs):
        scores = score(module, hidden_states, keys, values, attentions, kwargs)
        n_kept = kvpress_module().utils.compute_n_kept(keys.shape[2], press.compression_ratio)
        top = scores.topk(n_kept, dim=-1).indices  # what ScorerPress.compress gathers, in this order
        kept.positions[current["layer"]] = top[0].sort(dim=-1).values.cpu()
        kept.prompt_tokens = keys.shape[2]
        return scores

    press.forward_hook, press.score = forward_hook, recorded_score
    return press


@contextmanager
def pressed(model, press):
    """While inside, the model's prompt forward compresses the cache; yields the `Kept` record."""
    kept = Kept()
    with adapt(press, kept)(model):
        yield kept
