"""Shared by the Shrink tests: one full-vs-shrunk comparison per kind of setting on the tiny Llama,
run once per session (test_trace.py and test_report.py both read it)."""
import pytest
import torch
from tiny import tiny_lm

from kvviz.shrink import compute as shrink

PROMPT_TOKENS, NEW_TOKENS = 40, 6
PIECES = [f"t{i}" for i in range(PROMPT_TOKENS)]


@pytest.fixture(scope="session", params=[shrink.ShrinkMode(press="StreamingLLM", ratio=0.5),
                                         shrink.ShrinkMode(backend="quanto", nbits=4, residual_length=4)],
                ids=["press", "quantized"])
def tiny_comparison(request) -> shrink.Comparison:
    """A press and a quantized cache against the full cache: 40 prompt tokens, 6 new."""
    ids = torch.randint(2, 300, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(0))
    return shrink.compare(tiny_lm("llama"), ids, NEW_TOKENS, request.param)
