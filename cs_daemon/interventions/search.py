"""Interventions and escalations as the console lists them: filtered by status, channel,
playbook and test data, newest planned first, a page at a time with an opaque cursor
(docs/console.md). Also the names a list shows beside ids, and an intervention's
deliveries with every attempt."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from .. import jsontext
from ..customers.models import Customer
from ..delivery import service as delivery
from ..delivery.models import Delivery, DeliveryAttempt
from ..errors import ValidationFailed
from ..playbooks.models import Playbook
from .models import Intervention
from .service import ESCALATE, ESCALATION_STATUSES, INTERVENTION_STATUSES

PAGE = 25


@dataclass(frozen=True)
class Page:
    items: list[Intervention]
    next_cursor: str | None


def find(session: Session, *, escalations: bool = False, status: str | None = None, channel: str | None = None,
         playbook_id: str | None = None, test: bool | None = None, cursor: str | None = None,
         limit: int = PAGE) -> Page:
    _check(escalations, status)
    query = (select(Intervention)
             .where(Intervention.channel == ESCALATE if escalations else Intervention.channel != ESCALATE)
             .order_by(Intervention.planned_at.desc(), Intervention.id.desc()).limit(limit + 1))
    if status:
        query = query.where(Intervention.status == status)
    if channel and not escalations:
        query = query.where(Intervention.channel == channel)
    if playbook_id:
        query = query.where(Intervention.playbook_id == playbook_id)
    if test is not None:
        query = query.where(Intervention.test.is_(test))
    if cursor:
        at, iv_id = decode(cursor)
        query = query.where(or_(Intervention.planned_at < at, and_(Intervention.planned_at == at,
                                                                    Intervention.id < iv_id)))
    rows = list(session.scalars(query))
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, encode(rows[-1].planned_at, rows[-1].id) if more and rows else None)


def _check(escalations: bool, status: str | None) -> None:
    allowed = ESCALATION_STATUSES if escalations else INTERVENTION_STATUSES
    if status and status not in allowed:
        raise ValidationFailed(f"unknown status {status!r}: one of {', '.join(allowed)}",
                               [{"field": "status", "message": f"must be one of {', '.join(allowed)}"}])


def encode(at: datetime, item_id: str) -> str:
    raw = json.dumps([at.isoformat(), item_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, item_id = jsontext.loads(raw)
        when = datetime.fromisoformat(at)
        if when.tzinfo is None or not isinstance(item_id, str):
            raise ValueError("not a cursor")
        return when.astimezone(timezone.utc), item_id
    except (ValueError, TypeError, OverflowError):
        raise ValidationFailed("invalid cursor: not a cursor from this list",
                               [{"field": "cursor", "message": "not a cursor from this list"}]) from None


def people(session: Session, user_ids: list[str]) -> dict[str, Customer]:
    """The customers of these ids, in one query (a tenant session)."""
    ids = list(dict.fromkeys(user_ids))
    if not ids:
        return {}
    return {c.id: c for c in session.scalars(select(Customer).where(Customer.id.in_(ids)))}


def playbook_names(session: Session) -> dict[str, str]:
    return dict(session.execute(select(Playbook.id, Playbook.name)).all())


@dataclass(frozen=True)
class Sent:
    delivery: Delivery
    attempts: list[DeliveryAttempt]


def deliveries_of(session: Session, intervention_id: str) -> list[Sent]:
    """The deliveries of an intervention, oldest first, each with its attempts."""
    rows = list(session.scalars(select(Delivery).where(Delivery.subject_id == intervention_id)
                                .order_by(Delivery.created_at, Delivery.id)))
    attempts = delivery.attempts_of(session, [d.id for d in rows])
    return [Sent(d, attempts.get(d.id, [])) for d in rows]
