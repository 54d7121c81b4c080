"""Record events for outbound delivery, in the caller's transaction: the outbox row and
one delivery per subscribed endpoint are written together, so a committed event can
never miss its webhooks."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import insert
from sqlalchemy.orm import Session

from ..db import new_id
from .models import OutboxEvent


def record_many(session: Session, tenant_id: str, events: list[tuple[str, dict]], *,
                now: datetime, test: bool = False) -> list[str]:
    """`events` are (event_type, payload) pairs; each payload gets `event` = its type.
    Returns the event ids."""
    if not events:
        return []
    from ..webhooks.service import fan_out

    rows = [{"id": new_id(), "tenant_id": tenant_id, "event_type": kind,
             "payload": {"event": kind, **payload}, "test": test, "created_at": now,
             "fanned_out_at": now} for kind, payload in events]
    session.execute(insert(OutboxEvent.__table__), rows)
    fan_out(session, tenant_id, [(r["id"], r["event_type"], r["payload"]) for r in rows], now=now, test=test)
    return [r["id"] for r in rows]


def record(session: Session, tenant_id: str, event_type: str, payload: dict, *, now: datetime,
           test: bool = False) -> str:
    return record_many(session, tenant_id, [(event_type, payload)], now=now, test=test)[0]
