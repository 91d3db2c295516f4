"""What to load and how to run (kvviz.core.config): LoadConfig's defaults, RunConfig's batch of
prompts (copies of one, or the prompts as given, a mismatch refused in words), greedy at
temperature 0, notes left out of equality, and both frozen; RunConfig built by keyword only.
(The flags `kvviz record` derives from these fields: tests/test_cli.py.)"""
import dataclasses

import pytest

from kvviz.core.config import DEFAULT_MODEL, LoadConfig, RunConfig
from kvviz.core.errors import UserError


def test_load_config_defaults_to_the_embedded_model_chosen_by_device():
    assert LoadConfig() == LoadConfig(DEFAULT_MODEL, "auto", "auto", "sdpa", None) and DEFAULT_MODEL == "default"
    with pytest.raises(dataclasses.FrozenInstanceError):
        LoadConfig().name = "other"


def test_one_prompt_is_copied_batch_times_and_several_are_the_batch():
    assert RunConfig(prompts=("hi",), batch=3).prompt_list() == ["hi", "hi", "hi"]
    assert RunConfig(prompts=("a", "b"), batch=2).prompt_list() == ["a", "b"]
    assert RunConfig(prompts=("a", "b")).prompt_list() == ["a", "b"]  # batch 1 means "as given"
    with pytest.raises(UserError, match="batch=3 but 2 prompts were given"):
        RunConfig(prompts=("a", "b"), batch=3).prompt_list()


def test_greedy_at_temperature_zero_notes_left_out_of_equality_and_keywords_only():
    assert RunConfig().greedy and RunConfig(temperature=-1).greedy and not RunConfig(temperature=0.7).greedy
    assert RunConfig(extra={"note": 1}) == RunConfig()
    with pytest.raises(TypeError):
        RunConfig(("hi",), 2)  # a reordered field can never shift values at a call site
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunConfig().batch = 2
