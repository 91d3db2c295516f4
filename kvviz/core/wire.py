"""What every kvviz file format shares: a `format` name and a `version`, read before the rest,
and a refusal worded by kvviz that quotes nothing from the file (`problem`)."""
from __future__ import annotations

import re
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


_KINDS = {"int": "a whole number", "float": "a number", "str": "text", "bool": "true or false",
          "array": "a list", "object": "an object", "null": "null"}
_SAFE_PATH = re.compile(r"\$[\w.\[\]]{0,120}")
_NAME = re.compile(r"\w{1,60}")


def problem(exc: Exception) -> str:
    """msgspec's refusal in kvviz's words: where (its path, when it names only field names and
    indexes) and what was expected, never a value, key or text taken from the file."""
    text, _, at = str(exc).partition(" - at `")
    path = at.rstrip("`")
    where = f"{path}: " if _SAFE_PATH.fullmatch(path) else ("a field: " if path else "")
    if not isinstance(exc, msgspec.ValidationError):  # (a ValidationError is a DecodeError too)
        return "it is not valid JSON" + (f" ({text.split(':', 1)[-1].strip()})" if "byte" in text else "")
    if text.startswith("Invalid enum value"):
        return f"{where}not one of the values kvviz writes there"
    if text.startswith("Object contains unknown field"):
        return f"{where or '$: '}an unknown field (not one kvviz writes)"
    if text.startswith("Object missing required field"):
        name = text.rsplit("`", 2)[-2] if text.count("`") >= 2 else ""
        return f"{where or '$: '}the field {name if _NAME.fullmatch(name) else '…'} is missing"
    if text == "Number out of range":
        return f"{where}a number out of range"
    expected = re.match(r"Expected `(\w+)`(?:, got `(\w+)`)?(.*)$", text)
    if expected:
        kind, got, rest = expected.groups()
        bound = re.sub(r"[^\w\s<>=.,-]", "", rest).strip()
        return (f"{where}expected {_KINDS.get(kind, kind)}" + (f" {bound}" if bound else "")
                + (f", found {_KINDS.get(got, got)}" if got else ""))
    return f"{where}a value kvviz cannot read there"


def decode_versioned(data: bytes | str, doc_type: type[Doc], fmt: str, version: int) -> Doc:
    """`data` decoded as `doc_type` (a Struct with `format` and `version`), of this format and
    version; TraceError names what is wrong."""
    try:
        doc = msgspec.json.decode(data, type=doc_type)
    except RecursionError:
        raise TraceError(f"not a valid {fmt} file: it is nested too deeply") from None
    except MALFORMED as exc:
        raise TraceError(f"not a valid {fmt} file: {problem(exc)}") from None
    if doc.format != fmt or doc.version != version:
        shown = doc.format if _NAME.fullmatch(re.sub(r"[-.]", "_", doc.format)) else "another format"
        number = f"version {doc.version}" if abs(doc.version) < 10**6 else "a version no kvviz wrote"
        raise TraceError(f"this file is {shown!r} {number}; kvviz reads {fmt!r} version {version}")
    return doc
