"""connector-a: Segment messages (tracking API and webhook destination) to events.

A message is one of `track, identify, page, screen, group, alias`; a batch is
`{"batch": [message, ...]}`. The user is `userId`, else `anonymousId`; `messageId` is the
idempotency key; `timestamp` (else `originalTimestamp`) is when it happened.

- track → the event as named, with its `properties`;
- identify → `$identify` with the `traits`;
- page / screen → `$page` / `$screen` with `name`, `category` and the `properties`;
- group → `$group` with `group_id` and the group's `traits`;
- alias → `$alias` on `userId` with `previous_id`.
"""

from __future__ import annotations

from typing import Any

from ..customers.ingest import Incoming
from .common import BadPayload, each, first, identify, mapping, moment, record, text, tracked

PLATFORM = "segment"
KINDS = ("track", "identify", "page", "screen", "group", "alias")


def normalise(payload: Any, kind: str | None = None) -> list[Incoming]:
    """A single message or a batch. `kind` is the message type a native route implies
    (`/v1/track` …); `"batch"` requires a batch; None takes whichever was sent."""
    body = record(payload)
    if kind == "batch" or (kind is None and "batch" in body):
        return each(body.get("batch"), "batch", message)
    return message(body, kind)


def message(payload: Any, kind: str | None = None) -> list[Incoming]:
    msg = record(payload)
    kind = kind or msg.get("type")
    if kind not in KINDS:
        raise BadPayload.at("type", f"must be one of {', '.join(KINDS)}")
    user_id = _user(msg)
    when = moment(first(msg.get("timestamp"), msg.get("originalTimestamp")), "timestamp")
    key = text(msg.get("messageId"), "messageId", required=False)
    if kind == "identify":
        return [identify(user_id, mapping(msg.get("traits"), "traits"), when, key)]
    name, properties = _BUILD[kind](msg)
    return [tracked(PLATFORM, user_id, name, properties, when, key)]


def _user(msg: dict) -> str:
    user_id = first(msg.get("userId"), msg.get("anonymousId"))
    if user_id is None:
        raise BadPayload.at("userId", "userId or anonymousId is required")
    return text(user_id, "userId")


def _track(msg: dict) -> tuple[str, dict]:
    return text(msg.get("event"), "event"), mapping(msg.get("properties"), "properties")


def _view(event: str):
    def build(msg: dict) -> tuple[str, dict]:
        properties = dict(mapping(msg.get("properties"), "properties"))
        for field in ("name", "category"):
            if msg.get(field) is not None:
                properties.setdefault(field, msg[field])
        return event, properties

    return build


def _group(msg: dict) -> tuple[str, dict]:
    return "$group", {"group_id": text(msg.get("groupId"), "groupId"),
                      "traits": mapping(msg.get("traits"), "traits")}


def _alias(msg: dict) -> tuple[str, dict]:
    return "$alias", {"previous_id": text(msg.get("previousId"), "previousId")}


_BUILD = {"track": _track, "page": _view("$page"), "screen": _view("$screen"),
          "group": _group, "alias": _alias}
