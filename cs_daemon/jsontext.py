"""JSON text from outside (request bodies, connector payloads, import files), read as JSON
and nothing more. Python's json module also reads NaN and Infinity, and reads numbers
past a double's range as infinity; no JSON column or receiver takes those, so they are
refused here like any other malformed JSON, with a ValueError that says why."""

from __future__ import annotations

import json
import math
from typing import Any


def loads(text: str | bytes) -> Any:
    return json.loads(text, parse_constant=_not_json, parse_float=_finite)


def _not_json(constant: str):
    raise ValueError(f"{constant} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} is too large a number")
    return value
