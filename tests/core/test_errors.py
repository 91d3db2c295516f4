"""kvviz's one error hierarchy (kvviz.core.errors): every exception class kvviz or a page defines is a
KvvizError, the user-facing ones UserErrors (not ValueErrors: `except UserError` is refused input
and nothing else; a library's ValueError is shown generically to a hosted visitor), and one
out-of-memory test. Read from the source (ast), so a class in a module
that needs torch or Streamlit is checked without importing it."""
import ast
import builtins
import functools
import sys
from pathlib import Path

import pytest

from kvviz.core import errors
from kvviz.core.errors import GENERIC, KvvizError, UserError, out_of_memory, visitor_message

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "kvviz").rglob("*.py"), *(ROOT / "app_pages").glob("*.py"), ROOT / "app.py"])
BUILTIN_EXCEPTIONS = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
# Pinned: a class moving between the visitor's side and the log's is a decision, not a refactor.
USER_FACING = {"UserError", "UnknownModelType", "TraceError", "PlanError", "ConfigError", "NotServable", "UnknownArchitecture",
               "EngineError", "EngineUnreachable", "NotVllm", "EventsDisabled", "NotVllmMetrics",
               "SchemaMismatch", "RunTimeLimit", "MetaError", "LogError", "RequestLogError"}
INTERNAL = {"KvvizError", "ModelLoadError", "UnreadableCache", "ServingFailed"}


@functools.lru_cache(maxsize=None)
def classes_in(path: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(name, its bases' last names) of every class defined in the file at `path`."""
    return tuple((node.name, tuple(b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")
                                   for b in node.bases))
                 for node in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(node, ast.ClassDef))


def class_bases() -> dict[str, tuple[str, list[str]]]:
    """Every class defined in kvviz, app_pages and app.py: name -> (where, its bases' last names).
    Two classes of one name (private helpers) are read as one, their bases together."""
    found: dict[str, tuple[str, list[str]]] = {}
    for path in SOURCES:
        rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        for name, bases in classes_in(path):
            where, before = found.get(name, ("", []))
            found[name] = (where or str(rel), before + list(bases))
    return found


def ancestry(name: str, classes: dict) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        current = todo.pop()
        for base in classes.get(current, ("", []))[1]:
            if base not in seen:
                seen.add(base)
                todo.append(base)
    return seen


def exception_classes() -> dict[str, set[str]]:
    classes = class_bases()
    return {n: a for n in classes if (a := ancestry(n, classes)) & (BUILTIN_EXCEPTIONS | {"KvvizError"})
            or n == "KvvizError"}


def test_every_exception_class_derives_from_kvviz_error():
    outside = [f"{class_bases()[n][0]}: {n}" for n, a in exception_classes().items()
               if n != "KvvizError" and "KvvizError" not in a]
    assert not outside, outside


def test_each_exception_class_is_pinned_to_the_visitor_or_the_log():
    found = exception_classes()
    assert set(found) == USER_FACING | INTERNAL, "a new exception class: add it to USER_FACING or INTERNAL"
    assert {n for n, a in found.items() if n == "UserError" or "UserError" in a} == USER_FACING


def test_the_ast_reading_catches_a_class_off_the_base(tmp_path, monkeypatch):
    bad = tmp_path / "bad.py"
    bad.write_text("class Oops(KeyError):\n    pass\nclass Fine(UserError):\n    pass\n")
    monkeypatch.setattr(sys.modules[__name__], "SOURCES", [*SOURCES, bad])
    with pytest.raises(AssertionError, match="Oops"):
        test_every_exception_class_derives_from_kvviz_error()


def test_user_errors_are_not_value_errors_and_internal_ones_are_not_user_errors():
    from kvviz.engine.models import ModelLoadError
    from kvviz.core.trace import TraceError
    from kvviz.serving.compute import RunTimeLimit, ServingFailed

    for user_facing in (UserError, TraceError, RunTimeLimit):
        assert issubclass(user_facing, UserError) and not issubclass(user_facing, ValueError)
    with pytest.raises(ValueError):  # `except ValueError` no longer catches a refusal by mistake
        try:
            raise ValueError("a library's own refusal")
        except UserError:
            pytest.fail("a library's ValueError taken for refused input")
    assert issubclass(RunTimeLimit, TimeoutError)  # the Serving page's "Stopped" warning reads it
    for internal in (ModelLoadError, ServingFailed):
        assert issubclass(internal, KvvizError) and not issubclass(internal, UserError)
        assert visitor_message(internal("/home/me/model failed"), hosted=True) == GENERIC


def _shrink_run_refused(prompt: str):
    """The Shrink page's Run, with a tokenizer that refuses with a library's ValueError."""
    import types

    import streamlit as st

    from kvviz.app import ui
    from kvviz.shrink import panel

    class Tokenizer:
        chat_template = None

        def __call__(self, *args, **kwargs):
            raise ValueError("secret internal detail /srv/kvviz")

    lm = types.SimpleNamespace(tokenizer=Tokenizer())
    panel.run_clicked(lm, ui.policy(), types.SimpleNamespace(prompt=prompt), None, st.empty(), ())


@pytest.mark.parametrize("hosted", [True, False])
def test_a_library_value_error_on_a_page_is_generic_hosted_and_a_refusal_is_in_kvviz_words(monkeypatch, hosted):
    from streamlit.testing.v1 import AppTest

    from kvviz.app.ui import inert  # what the page escapes its sentences with
    if hosted:
        monkeypatch.setenv("KVVIZ_HOSTED", "1")
    else:
        monkeypatch.delenv("KVVIZ_HOSTED", raising=False)
    library = AppTest.from_function(_shrink_run_refused, args=("hello",), default_timeout=60).run()
    assert not library.exception  # caught by the page, not Streamlit's error box
    (shown,) = [e.value for e in library.error]
    if hosted:
        assert shown == f"Cannot run: {inert(GENERIC)}"
    else:
        assert shown == "Cannot run: " + inert("ValueError: secret internal detail /srv/kvviz")
    refused = AppTest.from_function(_shrink_run_refused, args=("  ",), default_timeout=60).run()
    assert [e.value for e in refused.error] == [
        "Cannot run: " + inert("the prompt is empty: type something for the model to continue")]


def test_a_time_limit_is_worded_for_the_visitor():
    from kvviz.serving import compute as serving

    cfg = serving.ServingConfig(time_limit_s=0.0)
    with pytest.raises(serving.RunTimeLimit) as info:
        serving.check_time(cfg, start=0.0)
    assert visitor_message(info.value, hosted=True) == "stopped at the limit of 0 s per run"


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError's name and base, without importing torch."""


@pytest.mark.parametrize("exc, expected", [
    (OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (type("Sub", (OutOfMemoryError,), {})("any words"), True),
    (MemoryError(), True),
    (RuntimeError("MPS backend out of memory (MPS allocated: 1.2 GB)"), True),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 bytes"), True),
    (RuntimeError("expected scalar type Float but found Half"), False),
    (UserError("the prompt is longer than this model's context; out of memory is not the problem"), False),
    (ValueError("out of memory"), False),
])
def test_one_out_of_memory_test(exc, expected):
    assert out_of_memory(exc) is expected


def test_torch_out_of_memory_is_recognized():
    import torch

    assert errors.out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
