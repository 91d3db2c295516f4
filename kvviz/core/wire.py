"""What every kvviz file format shares: a `format` name and a `version`, read before the rest."""
from __future__ import annotations

from typing import TypeVar

import msgspec

from kvviz.core.trace import TraceError

MALFORMED = (msgspec.ValidationError, msgspec.DecodeError, RecursionError)
Doc = TypeVar("Doc")


class _Peek(msgspec.Struct):
    format: str = ""


def has_format(data: bytes | str, fmt: str) -> bool:
    """Whether `data` is a JSON object whose `format` is `fmt` (nothing else is checked)."""
    try:
        return msgspec.json.decode(data, type=_Peek).format == fmt
    except MALFORMED:
        return False


def decode_versioned(data: bytes | str, doc_type: type[Doc], fmt: str, version: int) -> Doc:
    """`data` decoded as `doc_type` (a Struct with `format` and `version`), of this format and
    version; TraceError names what is wrong."""
    try:
        doc = msgspec.json.decode(data, type=doc_type)
    except MALFORMED as exc:
        raise TraceError(f"not a valid {fmt} file: {exc}") from None
    if doc.format != fmt or doc.version != version:
        raise TraceError(f"this file is {doc.format!r} version {doc.version}; kvviz reads {fmt!r} version {version}")
    return doc
