"""What the three connectors share: the error a bad payload raises, reading a field of a
platform record, normalising its times, and building the `Incoming` events of the one
ingest path."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from ..clock import in_utc
from ..customers.ingest import Incoming

MAX_TEXT = 255
# Event names the product gives a meaning to: only a platform's identify may produce them.
RESERVED_EVENTS = ("$identify", "$locale")
# Below this a number is seconds since the epoch, above it milliseconds (1e11 s is the
# year 5138; 1e11 ms is 1973).
MILLISECONDS_FROM = 1e11


class BadPayload(Exception):
    """A platform payload that cannot be normalised; `details` are `{field, message}`."""

    def __init__(self, details: list[dict]):
        self.details = details
        super().__init__(self.summary())

    @classmethod
    def at(cls, field: str, message: str) -> "BadPayload":
        return cls([{"field": field, "message": message}])

    def summary(self) -> str:
        return "; ".join(f"{d['field']}: {d['message']}" if d["field"] else d["message"]
                         for d in self.details)


def each(records: Any, where: str, normalise: Callable[[Any], list[Incoming]]) -> list[Incoming]:
    """Normalise every record of an array; collect the problems of all of them, each field
    named from the payload's root (`batch[2].userId`)."""
    if not isinstance(records, list):
        raise BadPayload.at(where, "must be an array")
    out: list[Incoming] = []
    problems: list[dict] = []
    for i, record in enumerate(records):
        try:
            out += normalise(record)
        except BadPayload as exc:
            problems += [{"field": _join(f"{where}[{i}]", d["field"]), "message": d["message"]}
                         for d in exc.details]
    if problems:
        raise BadPayload(problems)
    return out


def _join(prefix: str, field: str) -> str:
    if not prefix:
        return field
    return f"{prefix}.{field}" if field else prefix


def record(value: Any, field: str = "") -> dict:
    if not isinstance(value, dict):
        raise BadPayload.at(field, "must be a JSON object")
    return value


def mapping(value: Any, field: str) -> dict:
    """An optional object field: absent or null is `{}`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadPayload.at(field, "must be an object")
    return value


def first(*values: Any) -> Any:
    """The first value that is present (not None, not an empty string)."""
    return next((v for v in values if v is not None and v != ""), None)


def text(value: Any, field: str, *, required: bool = True) -> str | None:
    """A string field (a number is taken as its decimal text), 1 to 255 characters."""
    if value is None or value == "":
        if required:
            raise BadPayload.at(field, "is required")
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise BadPayload.at(field, "must be a string")
    value = str(value)
    if len(value) > MAX_TEXT:
        raise BadPayload.at(field, f"must be at most {MAX_TEXT} characters")
    return value


def moment(value: Any, field: str) -> datetime | None:
    """An ISO 8601 time, or seconds or milliseconds since the epoch, as an aware UTC
    datetime; a time without a zone is taken as UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _bad_time(field)
    if isinstance(value, str):
        return _parse_time(value.strip(), field)
    return _epoch(value, field)


def _parse_time(value: str, field: str) -> datetime:
    try:
        return _epoch(float(value), field)
    except ValueError:
        pass
    try:
        return in_utc(datetime.fromisoformat(value))
    except ValueError:
        raise _bad_time(field) from None


def _epoch(number: float, field: str) -> datetime:
    seconds = number / 1000 if abs(number) >= MILLISECONDS_FROM else number
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise _bad_time(field) from None


def _bad_time(field: str) -> BadPayload:
    return BadPayload.at(field, "must be an ISO 8601 time, or seconds or milliseconds since the epoch")


def tracked(platform: str, user_id: str, name: str, properties: dict, timestamp: datetime | None,
            key: str | None) -> Incoming:
    """A platform's tracked event. A name the product reserves is stored as
    `<platform>:<name>`, so only an identify fills customer fields."""
    if name in RESERVED_EVENTS:
        name = f"{platform}:{name}"
    return Incoming(user_id=user_id, event=name, properties=properties, timestamp=timestamp,
                    idempotency_key=key)


def identify(user_id: str, traits: dict, timestamp: datetime | None, key: str | None, *,
             counted: bool = True) -> Incoming:
    """The `$identify` event of a platform's identify: its traits fill the customer. Not
    `counted` when it only rides along another platform event (see Incoming)."""
    return Incoming(user_id=user_id, event="$identify", properties=person_traits(traits),
                    timestamp=timestamp, idempotency_key=key, counted=counted)


def person_traits(traits: dict) -> dict:
    """Traits as `$identify` reads them: `company` given as an object (Segment's spec)
    becomes its name (and `employee_count` the team size); first and last names make the
    name when none is given."""
    out = dict(traits)
    company = out.get("company")
    if isinstance(company, dict):
        out["company"] = company.get("name")
        if out.get("team_size") is None and company.get("employee_count") is not None:
            out["team_size"] = company["employee_count"]
    if not out.get("name"):
        full = " ".join(str(out[k]) for k in _NAME_PARTS if out.get(k))
        if full:
            out["name"] = full
    return {k: v for k, v in out.items() if v is not None}


_NAME_PARTS = ("firstName", "first_name", "lastName", "last_name")


def derived_key(key: str | None, suffix: str) -> str | None:
    """A second idempotency key from a platform id (for the identify carried by an event)."""
    if key is None:
        return None
    derived = f"{key}#{suffix}"
    return derived if len(derived) <= MAX_TEXT else hashlib.sha256(derived.encode()).hexdigest()


def without(properties: dict, names: Iterable[str]) -> dict:
    drop = set(names)
    return {k: v for k, v in properties.items() if k not in drop}
