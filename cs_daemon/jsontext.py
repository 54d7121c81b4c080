"""JSON text from outside (request bodies, connector payloads, import files), read as JSON
that can be stored. Python's json module also reads NaN and Infinity, and reads numbers
past a double's range as infinity; and JSON strings may hold the NUL character (\u0000),
which no PostgreSQL text or JSON value can. Values nested deeper than MAX_DEPTH levels
are refused too (Python's reader would run out of stack a few hundred levels further).
All of these are refused here with `Unstorable` (a ValueError, as for malformed JSON)
saying why."""

from __future__ import annotations

import json
import math
from typing import Any

NUL = "\x00"
_NUL_ESCAPE = "\\u0000"
MAX_DEPTH = 100
_TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels"


class Unstorable(ValueError):
    """JSON, or nearly, that no column or receiver could take."""


def loads(text: str | bytes) -> Any:
    try:
        value = json.loads(text, parse_constant=_not_json, parse_float=_finite)
    except RecursionError:
        raise Unstorable(_TOO_DEEP) from None
    opening = (b"[", b"{") if isinstance(text, bytes) else ("[", "{")
    if text.count(opening[0]) + text.count(opening[1]) > MAX_DEPTH and depth(value) > MAX_DEPTH:
        raise Unstorable(_TOO_DEEP)
    # only text that writes the escape can hold the character (JSON refuses it raw)
    escape = _NUL_ESCAPE.encode() if isinstance(text, bytes) else _NUL_ESCAPE
    if escape in text and holds_nul(value):
        raise Unstorable("strings may not contain \\u0000 (the NUL character)")
    return value


def depth(value: Any) -> int:
    """Levels of arrays and objects: 0 for a scalar, 1 for [1], 2 for [[1]]."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
            deepest = max(deepest, level + 1)
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
            deepest = max(deepest, level + 1)
    return deepest


def holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return NUL in value
    if isinstance(value, dict):
        return any(NUL in k or holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(holds_nul(v) for v in value)
    return False


def _not_json(constant: str):
    raise Unstorable(f"{constant} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise Unstorable(f"{text} is too large a number")
    return value
