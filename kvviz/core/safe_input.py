"""JSON from outside (pasted configs, uploads) parsed within bounds. Pure; stdlib only.

`loads` refuses, before or while parsing, text that is too large, nested too deeply or holds a
number too long (Python refuses integers over 4,300 digits with a ValueError, and deep nesting
ends json's decoder with RecursionError): every refusal is one `UserError` sentence that names
what was wrong and never quotes the input.
"""
from __future__ import annotations

import json

from kvviz.core.errors import UserError

MAX_DEPTH = 32  # a model config nests a few levels (text_config, rope_scaling, quantization...)
MAX_NUMBER_CHARS = 40  # digits, sign, point and exponent of one JSON number
MAX_CONFIG_CHARS = 1_000_000  # a config.json is a few KB; the largest known are ~100 KB


def loads(text: str | bytes, what: str, *, max_chars: int = MAX_CONFIG_CHARS,
          max_depth: int = MAX_DEPTH, max_number_chars: int = MAX_NUMBER_CHARS):
    """The JSON value in `text`, or UserError naming `what` ("the pasted config") and the bound."""
    text = _decode(text, what, max_chars)
    if not text.strip():
        raise UserError(f"{_cap(what)} is empty.")
    try:
        value = json.loads(text, parse_int=_bounded(int, what, max_number_chars),
                           parse_float=_bounded(float, what, max_number_chars),
                           parse_constant=_no_constant(what))
    except json.JSONDecodeError as err:  # err.msg is json's own wording, no input text
        raise UserError(f"{_cap(what)} is not valid JSON: {err.msg} (line {err.lineno}, "
                        f"column {err.colno}).") from None
    except RecursionError:
        raise UserError(f"{_cap(what)} is nested too deeply (at most {max_depth} levels).") from None
    depth = nesting_depth(value)
    if depth > max_depth:
        raise UserError(f"{_cap(what)} is nested {depth} levels deep; at most {max_depth} are accepted.")
    return value


def _decode(text: str | bytes, what: str, max_chars: int) -> str:
    size = len(text)
    if size > max_chars:
        unit = "bytes" if isinstance(text, bytes) else "characters"
        raise UserError(f"{_cap(what)} is {size:,} {unit}; at most {max_chars:,} are accepted.")
    if isinstance(text, bytes):
        try:
            return text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise UserError(f"{_cap(what)} is not UTF-8 text (bad byte at offset {exc.start}).") from None
    return text


def _bounded(kind, what: str, max_chars: int):
    def parse(literal: str):
        if len(literal) > max_chars:
            raise UserError(f"{_cap(what)} holds a number {len(literal):,} characters long; "
                            f"at most {max_chars} are accepted.")
        number = kind(literal)
        if kind is float and number in (float("inf"), float("-inf")):
            raise UserError(f"{_cap(what)} holds a number too large for a float.")
        return number
    return parse


def _no_constant(what: str):
    def parse(name: str):
        raise UserError(f"{_cap(what)} holds {name}, which is not a JSON number.")
    return parse


def nesting_depth(value) -> int:
    """How many arrays/objects deep `value` goes (0 for a scalar); iterative, any size."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def _cap(what: str) -> str:
    return what[:1].upper() + what[1:]
