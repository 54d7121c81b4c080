"""An event as posted to /api/track, stamped and serialised when it is queued."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, Mapping, Optional

# The service refuses bodies over 1 MiB (413); a batch stays under this many bytes.
MAX_BODY_BYTES = 1_000_000
_ENVELOPE = len(b'{"events":[]}')
MAX_EVENT_BYTES = MAX_BODY_BYTES - _ENVELOPE
MAX_NAME_CHARS = 255  # the service takes user ids and event names of 1 to 255 characters


@dataclass
class Queued:
    queued_at: float   # the clock's monotonic time when queued
    data: bytes        # the event's JSON


def stamp(user_id: str, event: str, properties: Optional[Mapping[str, Any]], now: datetime) -> bytes:
    """The event's JSON with its timestamp and a fresh idempotency key. The properties are
    serialised now, so a later change to the caller's dict does not change the event."""
    body = {
        "user_id": user_id,
        "event": event,
        "properties": dict(properties or {}),
        "timestamp": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "idempotency_key": str(uuid.uuid4()),
    }
    try:
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                          default=_jsonable).encode()
    except ValueError as exc:  # NaN or infinity (which the service refuses), or a cycle
        raise TypeError(f"the properties cannot be sent as JSON: {exc}") from None
    if len(data) > MAX_EVENT_BYTES:
        raise ValueError(f"the event is {len(data):,} bytes of JSON; at most {MAX_EVENT_BYTES:,} fit in a request")
    return data


def batch_body(items: list[Queued]) -> bytes:
    return b'{"events":[' + b",".join(item.data for item in items) + b"]}"


def decode(items: list[Queued]) -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(item.data) for item in items)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (set, frozenset)):
        return list(value)
    raise TypeError(f"a property of type {type(value).__name__} cannot be sent as JSON")


def require_text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, not {value!r}")
    return value


def require_name(name: str, value: Any) -> str:
    require_text(name, value)
    if len(value) > MAX_NAME_CHARS:
        raise ValueError(f"{name} must be at most {MAX_NAME_CHARS} characters, not {len(value)}")
    return value


def require_mapping(name: str, value: Any) -> Optional[Mapping[str, Any]]:
    if value is not None and not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict, not {type(value).__name__}")
    return value
