"""transformers' quantized caches (kvviz.shrink.quant_cache): the bytes a run's cache holds, step by
step, equal the formula for every backend and bit width (tiny random models; helpers from
test_compute.py)."""
import pytest
from tiny import tiny_lm

from kvviz.shrink import compute as shrink
from kvviz.shrink import quant_cache
from tests.shrink.test_compute import KINDS, NEW_TOKENS, PROMPT_TOKENS, kv_shape, prompt


QUANT = [("quanto", 2), ("quanto", 4), ("hqq", 2), ("hqq", 4), ("hqq", 8), ("fp8", 8)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("backend,nbits", QUANT)
def test_quantized_bytes_equal_formula(kind, backend, nbits):
    lm = tiny_lm(kind)
    layers, heads, head_dim = kv_shape(lm)
    residual = 5
    out = shrink.run(lm, prompt(), NEW_TOKENS, shrink.ShrinkMode(backend=backend, nbits=nbits,
                                                                 residual_length=residual))
    assert len(out.steps) == NEW_TOKENS
    for s in out.steps:
        want = quant_cache.formula(layers=layers, kv_heads=heads, head_dim=head_dim, tokens=PROMPT_TOKENS + s.step,
                                   decode_steps=s.step, backend=backend, nbits=nbits, residual_length=residual,
                                   elem_bytes=4)
        assert (s.payload_bytes, s.scale_bytes, s.residual_bytes) == (want.payload_bytes, want.scale_bytes,
                                                                      want.residual_bytes)
        assert s.kv_bytes == want.kv_bytes
    assert any(s.residual_bytes for s in out.steps) == (backend != "fp8")
