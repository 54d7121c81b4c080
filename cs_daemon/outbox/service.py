"""Record events for outbound delivery, in the caller's transaction."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import insert
from sqlalchemy.orm import Session

from ..db import new_id
from .models import OutboxEvent


def record_many(session: Session, tenant_id: str, events: list[tuple[str, dict]], *,
                now: datetime, test: bool = False) -> None:
    """`events` are (event_type, payload) pairs; each payload gets `event` = its type."""
    if not events:
        return
    session.execute(insert(OutboxEvent.__table__), [
        {"id": new_id(), "tenant_id": tenant_id, "event_type": kind,
         "payload": {"event": kind, **payload}, "test": test, "created_at": now, "fanned_out_at": None}
        for kind, payload in events
    ])
