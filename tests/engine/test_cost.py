"""The prefill's arithmetic and the device's pace on it: the modelled time left of a long pass."""
from dataclasses import replace

from kvviz.core.config import RunConfig
from kvviz.engine import cost, loop
from tiny import tiny_lm

LONG = "The key value cache keeps the keys. " * 22  # 224 tokens of the tiny tokenizer (context 256)


def test_only_a_long_prompt_gets_a_timed_pass_of_an_eighth_of_it():
    assert cost.calibration_tokens(cost.CALIBRATE_FROM_TOKENS - 1) == 0
    assert cost.calibration_tokens(cost.CALIBRATE_FROM_TOKENS) == cost.CALIBRATION_MIN
    assert cost.calibration_tokens(800) == 100 and cost.calibration_tokens(20_000) == cost.CALIBRATION_MAX


def test_a_first_long_prefill_has_a_pace_before_any_pass_of_the_run_was_timed():
    """The cached prefill comes first, so nothing of the run is measured while it runs: one timed
    no-cache pass over the prompt's first tokens gives the pace its time left is modelled from."""
    lm = tiny_lm()
    cfg = RunConfig(prompts=(LONG,), max_new_tokens=4)
    meta, work = loop.run_meta(lm, cfg), cost.model_work(lm)
    assert meta.prompt_tokens >= cost.CALIBRATE_FROM_TOKENS
    pace = cost.calibrated_seconds_per_flop(lm, cfg, work, meta.prompt_tokens)
    assert pace is not None and 0 < pace * work.prefill_flops(meta.prompt_tokens, 1) < 60
    short = replace(cfg, prompts=("Hello there",))
    assert cost.calibrated_seconds_per_flop(lm, short, work, loop.run_meta(lm, short).prompt_tokens) is None
