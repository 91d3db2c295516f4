"""Shrink on tiny models of several families (kvviz.shrink.support, compute): where a mode runs its
bytes equal the formula, its kept positions are kvpress's own selection and the full run equals
`model.generate`; where it cannot be right (sliding-window, hybrid, MLA layers) it is refused before
any run with a sentence that names the layers; and the request checks (context, token counts)."""
import pytest
import torch
from tiny import arch_lm
from transformers import DynamicCache

from kvviz.core.errors import UserError
from kvviz.shrink import compute as shrink
from kvviz.shrink import presses, quant_cache, support

PROMPT_TOKENS, NEW_TOKENS = 24, 6
RUNS = ("llama", "qwen3")  # full attention: every mode runs
# family -> (press refused because, quantized cache refused because): a phrase each sentence holds
REFUSED = {
    "phi3": ("layers 0–1 keep a sliding window", "layers 0–1 keep a sliding window"),
    "gemma3_text": ("layers 0–4 keep a sliding window", "layers 0–4 keep a sliding window"),
    "qwen3_next": ("layers 0–2 keep a linear-attention", "layers 0–2 keep a linear-attention"),
    "jamba": ("layer 0 keeps a linear-attention", "layer 0 keeps a linear-attention"),
    "deepseek_v3": ("has no `head_dim`", ""),
}


def prompt() -> torch.Tensor:
    return torch.randint(2, 300, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(3))


def shape(lm) -> tuple[int, int, int]:
    c = lm.model.config
    return c.num_hidden_layers, c.num_key_value_heads, getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads


@pytest.mark.parametrize("family", list(REFUSED))
def test_modes_that_cannot_be_right_are_refused_with_the_layers_named(family):
    lm = arch_lm(family)
    for why, mode in zip(REFUSED[family], (shrink.ShrinkMode(press="Knorm"), shrink.ShrinkMode(backend="fp8"))):
        assert support.refusal(lm.model, mode) == "" if not why else why in support.refusal(lm.model, mode)
        if why:
            with pytest.raises(UserError, match="is not offered for this model"):
                shrink.run(lm, prompt(), 2, mode)  # refused before a step, never a traceback


@pytest.mark.parametrize("family", RUNS)
def test_full_run_equals_generate_and_press_bytes_equal_formula(family):
    lm, ids = arch_lm(family), prompt()
    assert support.refusal(lm.model, shrink.ShrinkMode(press="SnapKV")) == ""
    full = shrink.run(lm, ids, NEW_TOKENS, shrink.ShrinkMode())
    with torch.inference_mode():
        ref = lm.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, pad_token_id=1,
                                max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)
    assert full.tokens == ref[0, PROMPT_TOKENS:].tolist()
    layers, heads, head_dim = shape(lm)
    per_token = layers * 2 * heads * head_dim * 4
    assert [s.kv_bytes for s in full.steps] == [per_token * (PROMPT_TOKENS + i) for i in range(NEW_TOKENS)]
    snap = shrink.run(lm, ids, NEW_TOKENS, shrink.ShrinkMode(press="SnapKV", ratio=0.75))
    kept = PROMPT_TOKENS // 4
    assert [s.kv_bytes for s in snap.steps] == [per_token * (kept + i) for i in range(NEW_TOKENS)]


@pytest.mark.parametrize("family", RUNS)
def test_quantized_bytes_equal_formula(family):
    lm = arch_lm(family)
    layers, heads, head_dim = shape(lm)
    for backend, nbits in (("quanto", 4), ("fp8", 8)):
        out = shrink.run(lm, prompt(), NEW_TOKENS, shrink.ShrinkMode(backend=backend, nbits=nbits, residual_length=4))
        for s in out.steps:
            want = quant_cache.formula(layers=layers, kv_heads=heads, head_dim=head_dim, tokens=PROMPT_TOKENS + s.step,
                                       decode_steps=s.step, backend=backend, nbits=nbits, residual_length=4,
                                       elem_bytes=4)
            assert (s.payload_bytes, s.scale_bytes, s.residual_bytes) == (want.payload_bytes, want.scale_bytes,
                                                                          want.residual_bytes)


def test_kept_positions_are_kvpress_own_selection_on_qwen3():
    """The cache rows a press left are the full prefill's rows at the recorded positions."""
    lm, ids = arch_lm("qwen3"), prompt()
    full = DynamicCache(config=lm.model.config)
    with torch.inference_mode():
        lm.model(input_ids=ids, cache=full, use_cache=True)
    cache = DynamicCache(config=lm.model.config)
    with torch.inference_mode(), presses.pressed(lm.model, presses.make_press("TOVA", 0.5, PROMPT_TOKENS)) as kept:
        lm.model(input_ids=ids, cache=cache, use_cache=True)
    assert sorted(kept.positions) == list(range(lm.model.config.num_hidden_layers))
    for layer, positions in kept.positions.items():
        for head, row in enumerate(positions):
            want, got = full.layers[layer].keys[0, head, row], cache.layers[layer].keys[0, head]
            match = (got[:, None, :] == want[None, :, :]).all(-1)
            assert got.shape == want.shape and match.any(1).all() and match.any(0).all()


def test_the_prompt_is_checked_against_the_models_context():
    lm = arch_lm("llama")  # max_position_embeddings 256
    long = torch.randint(2, 300, (1, 252), generator=torch.Generator().manual_seed(0))
    with pytest.raises(UserError, match=r"prompt \(252 tokens\) \+ new tokens \(6\) = 258 exceeds this "
                                        r"model's context of 256 tokens"):
        shrink.run(lm, long, 6, shrink.ShrinkMode(press="Knorm"))
    with pytest.raises(UserError, match="the prompt is 1 token;"):
        shrink.run(lm, long[:, :1], 2, shrink.ShrinkMode(press="Knorm"))
