"""JSON text from outside (request bodies, connector payloads, import files), read as JSON
that can be stored. Python's json module also reads NaN and Infinity, and reads numbers
past a double's range as infinity; and JSON strings may hold the NUL character (\u0000),
which no PostgreSQL text or JSON value can, or a lone UTF-16 surrogate (\ud800 without
its pair), which is no character at all and which no UTF-8 text (neither database, nor
any receiver) can hold. Values nested deeper than MAX_DEPTH levels are refused too
(Python's reader would run out of stack a few hundred levels further). All of these are
refused here with `Unstorable` (a ValueError, as for malformed JSON) saying why."""

from __future__ import annotations

import json
import math
import re
from typing import Any, Callable

NUL = "\x00"
_NUL_ESCAPE = "\\u0000"
SURROGATE = re.compile("[\ud800-\udfff]")
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
    if _may_hold_surrogate(text) and holds_surrogate(value):
        raise Unstorable("strings may not contain a lone UTF-16 surrogate (\\ud800 to \\udfff without its pair)")
    return value


def _may_hold_surrogate(text: str | bytes) -> bool:
    """Bytes decoded as UTF-8 hold surrogates only where the text escapes them (\\uD83D);
    a str may hold them raw too."""
    if isinstance(text, bytes):
        return b"\\ud" in text or b"\\uD" in text
    return "\\ud" in text or "\\uD" in text or (not text.isascii() and SURROGATE.search(text) is not None)


def depth(value: Any) -> int:
    """Levels of arrays and objects: 0 for a scalar, 1 for [1], 2 for [[1]]. Level by
    level, keeping only the containers (a body's values are mostly scalars: 3x faster
    than carrying every value with its level)."""
    level, frontier = 0, [value] if isinstance(value, (dict, list)) else []
    while frontier:
        level += 1
        below = []
        for item in frontier:
            for v in item.values() if isinstance(item, dict) else item:
                if isinstance(v, (dict, list)):
                    below.append(v)
        frontier = below
    return level


def holds_nul(value: Any) -> bool:
    return _holds(value, lambda text: NUL in text)


def holds_surrogate(value: Any) -> bool:
    return _holds(value, lambda text: SURROGATE.search(text) is not None)


def _holds(value: Any, bad: Callable[[str], bool]) -> bool:
    """Whether any string of `value`, key or value, is `bad`."""
    if isinstance(value, str):
        return bad(value)
    if isinstance(value, dict):
        return any(bad(k) or _holds(v, bad) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds(v, bad) for v in value)
    return False


def _not_json(constant: str):
    raise Unstorable(f"{constant} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise Unstorable(f"{text} is too large a number")
    return value
