"""connector-c: Amplitude events (HTTP V2 and Batch API, and export lines) to events.

A payload is `{"api_key", "events": [event, ...]}` or one bare event. An event has
`user_id` (else `device_id`), `event_type`, `time` in milliseconds (an export's
`event_time` works too), `insert_id` (or `$insert_id`) as the idempotency key,
`event_properties` and `user_properties`.

- `$identify` → our `$identify` with the user properties as traits;
- any other event → the event as named, with its `event_properties`, preceded by an
  `$identify` when it carries user properties (stored, but not counted in `accepted`:
  the caller sent one event).

User properties count as traits when flat (`{"plan": "pro"}`) or under `$set`; other
operations (`$setOnce`, `$add`, `$unset` …) are ignored.
"""

from __future__ import annotations

from typing import Any

from ..customers.ingest import Incoming
from .common import (
    BadPayload, derived_key, each, first, identify, mapping, moment, record, text, tracked,
)

PLATFORM = "amplitude"


def normalise(payload: Any) -> list[Incoming]:
    body = record(payload)
    if "events" not in body and "event_type" in body:
        return normalise_event(body)
    if not isinstance(body.get("events"), list):
        raise BadPayload.at("events", "is required: an array of events")
    return each(body["events"], "events", normalise_event)


def count_events(payload: Any) -> int:
    """How many platform events a valid payload holds (Amplitude's `events_ingested`)."""
    return len(payload["events"]) if "events" in payload else 1


def normalise_event(payload: Any) -> list[Incoming]:
    event = record(payload)
    user = first(event.get("user_id"), event.get("device_id"))
    if user is None:
        raise BadPayload.at("user_id", "user_id or device_id is required")
    user_id = text(user, "user_id")
    name = text(event.get("event_type"), "event_type")
    when = moment(first(event.get("time"), event.get("event_time")), "time")
    key = text(first(event.get("insert_id"), event.get("$insert_id")), "insert_id", required=False)
    traits = user_traits(mapping(event.get("user_properties"), "user_properties"))
    if name == "$identify":
        return [identify(user_id, traits, when, key)]
    properties = mapping(event.get("event_properties"), "event_properties")
    out = [identify(user_id, traits, when, derived_key(key, "identify"), counted=False)] if traits else []
    return out + [tracked(PLATFORM, user_id, name, properties, when, key)]


def user_traits(user_properties: dict) -> dict:
    flat = {k: v for k, v in user_properties.items() if not k.startswith("$")}
    updates = user_properties.get("$set")
    if updates is not None and not isinstance(updates, dict):
        raise BadPayload.at("user_properties.$set", "must be an object")
    return {**flat, **(updates or {})}
