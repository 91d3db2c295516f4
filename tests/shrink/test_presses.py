"""kvpress's presses on transformers 5.24 (kvviz.shrink.presses): every press offered, the cache rows a
press keeps are the full prefill's rows at the positions it reports, StreamingLLM's sinks and
window (tiny random models; the prompt and model helpers are test_compute.py's)."""
import pytest
import torch
from tiny import tiny_lm
from transformers import DynamicCache

from kvviz.shrink import compute as shrink
from kvviz.shrink import presses
from tests.shrink.test_compute import KINDS, PROMPT_TOKENS, prompt


@pytest.mark.slow
def test_every_press_is_offered_here():
    offered, refused = presses.offered()
    assert set(offered) == set(presses.PRESSES) and not refused
    assert all(sentence.endswith(".") and len(sentence) > 30 for sentence in offered.values())


@pytest.mark.parametrize("kind", KINDS)
def test_kept_positions_are_the_cache_rows(kind):
    """The press's cache rows are the full prefill's rows at the recovered positions (as sets:
    the cache holds them in score order)."""
    lm = tiny_lm(kind)
    ids, full = prompt(), DynamicCache(config=lm.model.config)
    with torch.inference_mode():
        lm.model(input_ids=ids, cache=full, use_cache=True)
    for name in ("Knorm", "TOVA"):
        cache = DynamicCache(config=lm.model.config)
        with torch.inference_mode(), presses.pressed(lm.model, presses.make_press(name, 0.5, PROMPT_TOKENS)) as kept:
            lm.model(input_ids=ids, cache=cache, use_cache=True)
        for layer, positions in kept.positions.items():
            for head, row in enumerate(positions):
                want = full.layers[layer].keys[0, head, row]
                got = cache.layers[layer].keys[0, head]
                match = (got[:, None, :] == want[None, :, :]).all(-1)  # (cache row, position) exact
                assert match.any(1).all() and match.any(0).all() and got.shape == want.shape


def test_streaming_llm_keeps_sinks_and_recent_window():
    out = shrink.run(tiny_lm("llama"), prompt(), 2, shrink.ShrinkMode(press="StreamingLLM", ratio=0.5))
    want = list(range(4)) + list(range(PROMPT_TOKENS - 16, PROMPT_TOKENS))
    for positions in out.kept.values():
        assert all(row.tolist() == want for row in positions)
