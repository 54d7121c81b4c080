"""Applying traits and scores to a customer row (shared by ingest, the sweep and the API)."""

from __future__ import annotations

import math
import re
from datetime import datetime

from ..engine import scoring
from . import fields
from .models import Customer

IDENTITY_FIELDS = fields.IDENTITY
TRAIT_EVENTS = frozenset(scoring.SPECIAL_EVENTS)   # $identify, $locale: the events apply_traits acts on


def apply_traits(customer: Customer, event: str, properties: dict) -> None:
    """`$identify` fills the identity fields and keeps other traits; `$locale` sets locale
    (TRAIT_EVENTS); any other event, nothing."""
    if event == "$identify":
        merge_traits(customer, properties)
    elif event == "$locale":
        locale = properties.get("locale")
        if isinstance(locale, str) and locale.strip():
            customer.locale = locale.strip()[:35]


def merge_traits(customer: Customer, traits: dict) -> None:
    """The identity fields from the traits that are values of them (docs/scoring.md,
    "Traits"); every other trait, and an identity trait that is not a value of its field
    (an email that is no address, an object for a name), is kept in `traits`."""
    extra = dict(customer.traits or {})
    for key, value in (traits or {}).items():
        if key in IDENTITY_FIELDS and value is not None:
            field_value = _identity_value(key, value)
            if field_value is None:
                extra[key] = value
            else:
                setattr(customer, key, field_value)
                extra.pop(key, None)
        elif key == "locale" and isinstance(value, str):
            customer.locale = value[:35]
        else:
            extra[key] = value
    customer.traits = extra


_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


def _identity_value(key: str, value) -> str | int | None:
    """The value of identity field `key` that a trait gives, or None when it gives none."""
    if type(value) is bool:
        return None
    if key == "team_size":
        return _int(value)
    if key == "email":
        return value if isinstance(value, str) and len(value) <= 320 and _EMAIL.fullmatch(value) else None
    if isinstance(value, str):
        return value[:255]
    return str(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _int(value) -> int | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() and 0 <= number < 2**31 else None


def rescore(customer: Customer, state: scoring.UserState, config: dict | scoring.Rules,
            now: datetime) -> list[tuple[str, dict]]:
    """Evaluate and store scores; return the outbox events of a stage or risk change
    (none on a user's first scoring)."""
    # of the traits, scoring reads the team size, which the column holds
    scores = scoring.evaluate(state, {"team_size": customer.team_size}, config, now)
    scoring.record_health(state, scores.health, now)
    first = customer.scored_at is None
    before_stage, before_risk = customer.lifecycle_stage, customer.risk_level
    customer.activation_score = scores.activation_score
    customer.engagement_score = scores.engagement_score
    customer.expansion_score = scores.expansion_score
    customer.health = scores.health
    customer.risk_level = scores.risk_level
    customer.lifecycle_stage = scores.lifecycle_stage
    customer.last_activity_at = state.last_activity_at
    customer.state = state.to_json()
    customer.scored_at = now
    customer.updated_at = now
    if first or (scores.lifecycle_stage == before_stage and scores.risk_level == before_risk):
        return []
    at = now.isoformat()
    changes = []
    if scores.lifecycle_stage != before_stage:
        body = {"user_id": customer.id, "previous_stage": before_stage,
                "new_stage": scores.lifecycle_stage, "changed_at": at}
        changes += [("user.stage_changed", body), ("user.lifecycle_changed", body)]
    if scores.risk_level != before_risk:
        changes.append(("user.risk_changed", {"user_id": customer.id, "previous_risk": before_risk,
                                              "new_risk": scores.risk_level, "changed_at": at}))
    return changes
