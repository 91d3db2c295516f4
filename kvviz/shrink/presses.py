"""NVIDIA kvpress presses on transformers 5.24: the one adapter, the presses offered, kept positions.

kvpress 0.5.5 (installed --no-deps; it declares transformers<5.3) hooks every attention layer
and, after the prompt's forward, replaces that layer's keys/values with the ones it keeps. Its
hook reads `kwargs["past_key_values"]` and `kwargs["cache_position"]`; 5.24 passes the cache as
`cache` and no longer passes positions. `adapt` supplies both (positions: the last q_len of the
layer's length). The press keeps tokens in score order (its `topk`), not position order, so the
score is recorded per layer to give back the kept positions, per KV head.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from kvviz.core.errors import UserError

# name -> (kvpress class, one plain sentence on what it keeps and why): the presses the Shrink page's
# side-by-side offers (its kept map reads each one's scores, `adapt`)
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
# The presses the quality sweep adds, as the kvpress leaderboard configures them (its
# press_init_command): name -> (kvpress class, sentence). "Head-wise" presses (HEADWISE) keep a
# different number of positions per head: kvpress masks the others in attention (a key no query
# can attend to) and the cache keeps every row, so they save no bytes in kvpress 0.5.5.
MORE_PRESSES = {
    "KVzip": ("KVzipPress", "Keeps what the model needs to repeat the context word for word (it scores "
              "positions by replaying the context once more), per head and layer, whatever the question."),
    "AdaKV-ExpectedAttention": ("AdaKVPress", "ExpectedAttention's scores, with the budget shared across "
                                "heads (AdaKV): each head keeps what it needs, at least 20% of its share. "
                                "The kvpress leaderboard's 'ExpectedAttention' entry."),
    "KeyDiff": ("KeyDiffPress", "Keeps the tokens whose keys differ most from the average key."),
    "LagKV": ("LagKVPress", "Scores each stretch of 128 tokens against the next stretch's keys and "
              "values, without attention weights or the question."),
    "PyramidKV": ("PyramidKVPress", "SnapKV's scores with more positions kept in lower layers and "
                  "fewer in higher ones (the same total)."),
    "CUR": ("CURPress", "Keeps the tokens whose keys and values carry the most weight (approximate "
            "leverage scores of a CUR decomposition), the first 4 always."),
}
ALL_PRESSES = {**PRESSES, **MORE_PRESSES}
HEADWISE = frozenset({"KVzip", "AdaKV-ExpectedAttention"})
QUESTION_AWARE = frozenset({"SnapKV"})  # the leaderboard also reports these with the question compressed
NONE = "none"
MIN_PROMPT_TOKENS = 8  # fewer leave a press nothing to choose between
SNAPKV_WINDOW = 64  # kvpress's default observation window (tokens at the end of the prompt)


def kvpress_module():
    """kvpress, imported on first use (≈ 1 s over transformers; it imports `datasets`)."""
    import kvpress
    return kvpress


def offered(registry: dict | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """({name: sentence} for presses that can run here, {name: why not} for the others), of
    `registry` (default: PRESSES, the side-by-side's; the sweep passes ALL_PRESSES)."""
    registry = PRESSES if registry is None else registry
    try:
        module = kvpress_module()
    except Exception as exc:  # noqa: BLE001 - any import failure means no presses, said plainly
        return {}, {name: f"kvpress does not import: {exc}" for name in registry}
    ok, refused = {}, {}
    for name, (cls, sentence) in registry.items():
        if hasattr(module, cls):
            ok[name] = sentence
        else:
            refused[name] = f"kvpress {module.__name__} has no {cls}"
    return ok, refused


def check(name: str, ratio: float) -> None:
    """UserError in plain words for a press kvviz does not offer or a ratio outside (0, 1)."""
    if name not in ALL_PRESSES:
        raise UserError(f"unknown press {name!r}: pick one of {', '.join(ALL_PRESSES)}")
    if not 0 < ratio < 1:
        raise UserError(f"the compression ratio is {ratio}; it must be above 0 and below 1")


def make_press(name: str, ratio: float, prompt_tokens: int):
    """A kvpress press that evicts `ratio` of the prompt's positions; UserError in plain words."""
    check(name, ratio)
    if prompt_tokens < MIN_PROMPT_TOKENS:
        noun = "token" if prompt_tokens == 1 else "tokens"
        raise UserError(f"the prompt is {prompt_tokens} {noun}; a press needs at least {MIN_PROMPT_TOKENS} "
                        "to choose from")
    kvpress = kvpress_module()
    cls = getattr(kvpress, ALL_PRESSES[name][0])
    if name in ("SnapKV", "PyramidKV"):  # the window must be shorter than the prompt
        return cls(compression_ratio=ratio, window_size=min(SNAPKV_WINDOW, prompt_tokens // 2))
    if name == "KVzip":  # (its constructor logs a warning about its cost on every call)
        logging.getLogger("kvpress.presses.kvzip_press").setLevel(logging.ERROR)
    if name == "AdaKV-ExpectedAttention":  # the leaderboard's ExpectedAttention entry
        return cls(press=kvpress.ExpectedAttentionPress(compression_ratio=ratio, epsilon=0.01), alpha_safeguard=0.2)
    return cls(compression_ratio=ratio)


@dataclass
class Kept:
    """Positions each layer kept: layer -> (kv_heads, kept) LongTensor, sorted per head."""

    positions: dict[int, torch.Tensor] = field(default_factory=dict)
    prompt_tokens: int = 0


def kwargs_for_kvpress(module, kwargs: dict) -> dict:
    """The attention hook's kwargs as kvpress 0.5.5 reads them: the cache also as
    `past_key_values`, and `cache_position` (the last q_len positions of the layer's length)."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    q_len = kwargs["hidden_states"].shape[1]
    length = cache.layers[module.layer_idx].get_seq_length()
    positions = torch.arange(length - q_len, length, device=kwargs["hidden_states"].device)
    return dict(kwargs, past_key_values=cache, cache_position=positions)


def shim(press):
    """Make `press` run on 5.24 (patches this press instance's hook only; nothing recorded)."""
    hook = press.forward_hook
    press.forward_hook = lambda module, args, kwargs, output: hook(module, args, kwargs_for_kvpress(module, kwargs),
                                                                   output)
    return press


def adapt(press, kept: Kept):
    """Make `press` run on 5.24 and record what it keeps (patches this press instance only)."""
    hook, score = press.forward_hook, press.score
    current = {}

    def forward_hook(module, args, kwargs, output):
        current["layer"] = module.layer_idx
        return hook(module, args, kwargs_for_kvpress(module, kwargs), output)

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
