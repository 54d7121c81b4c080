"""connector-b: Mixpanel records (ingestion API) to events.

A payload is one record or an array of them; the `data` field of a form post is the
same, as JSON or base64 of JSON.

- an event `{"event", "properties": {"distinct_id", "time", "$insert_id", "token", ...}}`
  → the event as named; the user is `distinct_id` (else `$user_id`, `$device_id`),
  `$insert_id` is the idempotency key, `time` (seconds or milliseconds) when it happened;
  the other properties are kept, the project `token` never;
- a profile update `{"$distinct_id", "$token", "$time", "$set": {...}}` → `$identify`
  with the `$set` traits, Mixpanel's `$` dropped from their names (`$email` → `email`).
  Other profile operations (`$set_once`, `$add`, `$unset` …) are accepted and ignored.
  A profile update's idempotency key is its `$insert_id`, else a digest of its user,
  `$time` and values.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from .. import jsontext
from ..customers.ingest import Incoming
from .common import BadPayload, each, first, identify, mapping, moment, record, text, tracked

PLATFORM = "mixpanel"
EVENT_SPECIALS = ("token", "distinct_id", "time", "$insert_id")


def normalise(payload: Any) -> list[Incoming]:
    if isinstance(payload, list):
        return each(payload, "", normalise_record)
    return normalise_record(payload)


def normalise_record(payload: Any) -> list[Incoming]:
    rec = record(payload)
    if "event" in rec:
        return _event(rec)
    if "$distinct_id" in rec:
        return _profile(rec)
    raise BadPayload.at("event", "a record needs `event` (an event) or `$distinct_id` (a profile update)")


def _event(rec: dict) -> list[Incoming]:
    name = text(rec.get("event"), "event")
    props = mapping(rec.get("properties"), "properties")
    user = first(props.get("distinct_id"), props.get("$user_id"), props.get("$device_id"))
    if user is None:
        raise BadPayload.at("properties.distinct_id", "is required")
    user_id = text(user, "properties.distinct_id")
    when = moment(props.get("time"), "properties.time")
    key = text(props.get("$insert_id"), "properties.$insert_id", required=False)
    kept = {k: v for k, v in props.items() if k not in EVENT_SPECIALS}
    return [tracked(PLATFORM, user_id, name, kept, when, key)]


def _profile(rec: dict) -> list[Incoming]:
    user_id = text(rec.get("$distinct_id"), "$distinct_id")
    when = moment(rec.get("$time"), "$time")
    traits = mapping(rec.get("$set"), "$set")
    if not traits:
        return []
    key = text(rec.get("$insert_id"), "$insert_id", required=False) or _profile_key(rec)
    return [identify(user_id, {k.removeprefix("$"): v for k, v in traits.items()}, when, key)]


def _profile_key(rec: dict) -> str | None:
    """A profile update has no event id: one with a `$time` (Mixpanel's clients always
    send it) is keyed by its user, time and values, so a retried request is a duplicate."""
    if rec.get("$time") is None:
        return None
    content = json.dumps([rec["$distinct_id"], rec["$time"], rec["$set"]], sort_keys=True, default=str)
    return "mixpanel-profile:" + hashlib.sha256(content.encode()).hexdigest()


def decode_data(data: str) -> Any:
    """The `data` form field: JSON, or base64 (standard or URL-safe) of JSON."""
    try:
        return jsontext.loads(data)
    except jsontext.Unstorable as exc:
        raise BadPayload.at("data", str(exc)) from None
    except ValueError:
        pass
    padded = data.strip() + "=" * (-len(data.strip()) % 4)
    for altchars in (None, b"-_"):
        try:
            return jsontext.loads(base64.b64decode(padded, altchars=altchars, validate=True))
        except jsontext.Unstorable as exc:
            raise BadPayload.at("data", str(exc)) from None
        except (binascii.Error, ValueError):
            continue
    raise BadPayload.at("data", "must be JSON or base64-encoded JSON")


def tokens(payload: Any) -> set[str]:
    """The project tokens the records carry (`token` in event properties, `$token` in
    profile updates): Mixpanel's credential."""
    found: set[str] = set()
    for rec in payload if isinstance(payload, list) else [payload]:
        if not isinstance(rec, dict):
            continue
        props = rec.get("properties")
        token = props.get("token") if isinstance(props, dict) else None
        for value in (token, rec.get("$token")):
            if isinstance(value, str) and value:
                found.add(value)
    return found
