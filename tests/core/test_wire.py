"""What every kvviz file format shares (kvviz.core.wire): the `format` peeked before the rest, a
document of the wrong format or version refused naming both, and msgspec's refusals put in kvviz's
words: where (a path of field names only) and what was expected, never a value from the file."""
from __future__ import annotations

from typing import Annotated, Literal

import msgspec
import pytest

from kvviz.core.trace import TraceError
from kvviz.core.wire import decode_versioned, has_format

SECRET = "SECRET<script>"


class Doc(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    version: int
    n: Annotated[int, msgspec.Meta(ge=0)] = 0
    kind: Literal["a", "b"] = "a"


def read(data: str) -> Doc:
    return decode_versioned(data, Doc, "kvviz-x", 2)


def test_has_format_peeks_at_the_format_only():
    assert has_format('{"format": "kvviz-x", "anything": [1, {"else": null}]}', "kvviz-x")
    assert has_format(b'{"format": "kvviz-x"}', "kvviz-x") and not has_format('{"format": "kvviz-y"}', "kvviz-x")
    for other in ("not json", '{"format": 3}', "[1]", "{}"):
        assert not has_format(other, "kvviz-x"), other


def test_a_document_of_this_format_and_version_is_read():
    assert read('{"format": "kvviz-x", "version": 2, "n": 5, "kind": "b"}') == Doc("kvviz-x", 2, 5, "b")


@pytest.mark.parametrize("body, sentence", [
    (f'"n": "{SECRET}"', "$.n: expected a whole number, found text"),
    ('"n": -1', "$.n: expected a whole number >= 0"),
    ('"n": 1e400', "$.n: a number out of range"),
    (f'"kind": "{SECRET}"', "$.kind: not one of the values kvviz writes there"),
    (f'"{SECRET}": 1', "$: an unknown field (not one kvviz writes)"),
])
def test_a_field_kvviz_cannot_read_is_named_by_its_path_and_no_value_is_quoted(body, sentence):
    with pytest.raises(TraceError) as refused:
        read('{"format": "kvviz-x", "version": 2, ' + body + "}")
    assert str(refused.value) == f"not a valid kvviz-x file: {sentence}"


def test_a_missing_field_and_text_that_is_not_json():
    with pytest.raises(TraceError, match=r"^not a valid kvviz-x file: \$: the field format is missing$"):
        read('{"version": 2}')
    with pytest.raises(TraceError) as not_json:
        read('{"format": x}')  # the x at byte 11
    assert str(not_json.value) == "not a valid kvviz-x file: it is not valid JSON (invalid character (byte 11))"
    with pytest.raises(TraceError, match=r"^not a valid kvviz-x file: expected an object, found a list$"):
        read("[1, 2]")


def test_another_format_or_version_is_named_and_a_strange_one_is_not_quoted():
    with pytest.raises(TraceError) as other:
        read('{"format": "kvviz-trace", "version": 1}')
    assert str(other.value) == "this file is 'kvviz-trace' version 1; kvviz reads 'kvviz-x' version 2"
    with pytest.raises(TraceError) as strange:
        read(f'{{"format": "{SECRET}", "version": 99999999}}')
    assert str(strange.value) == ("this file is 'another format' a version no kvviz wrote; "
                                  "kvviz reads 'kvviz-x' version 2")
