"""Event types an endpoint can subscribe to (docs/webhooks.md,
"Event catalogue")."""

from __future__ import annotations

import re

EVENT_TYPES = (
    "intervention.delivered", "intervention.failed", "intervention.escalated",
    "intervention.rolled_back", "user.stage_changed", "user.lifecycle_changed",
    "user.risk_changed", "user.responded", "user.opted_out", "decision.recommended",
    "outcome.recorded", "agent.action", "external_action.dispatched",
    "external_action.completed", "external_action.failed", "webhook.test",
)
CUSTOM_ALL = "custom.*"
CUSTOM_RE = re.compile(r"^custom\.[a-z0-9_]+(\.[a-z0-9_]+)+$")


def valid(name: str) -> bool:
    return name in EVENT_TYPES or name == CUSTOM_ALL or bool(CUSTOM_RE.match(name))


def matches(subscribed: list[str] | None, event_type: str) -> bool:
    """None (or omitted) subscribes to every event type."""
    if subscribed is None:
        return True
    if event_type in subscribed:
        return True
    return event_type.startswith("custom.") and CUSTOM_ALL in subscribed
