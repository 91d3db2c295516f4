"""The shrink benchmark (bench/shrink_modes.py): its rows and method text on a tiny random model, a
short prompt and a few tokens; structure only, never speed."""
import pytest
from tiny import tiny_lm

from bench.settings import Settings
from bench.shrink_modes import modes, shrink_modes

pytestmark = pytest.mark.slow  # runs the shrink benchmark: make test, not make check

PROMPT = "The key value cache keeps the keys and values of every past token. Tell me a story."


@pytest.fixture(scope="module")
def measured():
    return shrink_modes(tiny_lm("llama"), Settings(reps=1, new_tokens=4), prompt=PROMPT)


def test_two_rows_per_mode_and_one_target_that_passes(measured):
    rows, _ = measured
    every, _ = modes()
    assert len(every) >= 5 and len(rows) == 2 * len(every) + 1
    *per_mode, target = rows
    assert all(r.op is None for r in per_mode)
    assert target.op == ">=" and target.limit == 1.0 and target.passed and target.ratio == 1.0
    for mode, (size, step) in zip(every, zip(per_mode[::2], per_mode[1::2])):
        assert mode.label() in size.name and "cache bytes" in size.name and "decode step" in step.name
        assert size.measured.endswith(")") and " B (" in size.measured and step.ratio > 0
        assert 0 < size.ratio <= 1 if mode.press != "none" else size.ratio > 0


def test_method_names_every_mode_and_the_prompt(measured):
    _, method = measured
    for mode in modes()[0]:
        assert mode.label() in method
    assert "prompt tokens" in method and "4 greedy tokens" in method and "model.generate" in method
