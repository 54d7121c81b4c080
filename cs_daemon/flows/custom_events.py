"""Ingest custom events (docs/external-actions.md, "Custom events"): each is broadcast
to the subscribed webhook endpoints and stored as a user event through the one ingest
path, so it updates the customer and may owe a decision like a tracked event.
`POST /api/external/events` and `POST /api/external/events/emit` are this flow.

It lives here, not in the external actions' service, so that service (which decisions
call to dispatch actions) does not depend on ingest."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from ..customers import ingest
from ..outbox import service as outbox


def ingest_custom(session: Session, tenant_id: str, events: list, *, now: datetime, test: bool) -> tuple[int, int]:
    """Broadcast custom events (`external.schemas.CustomEvent`) and ingest them as user
    events, in the caller's unit of work. Events of new users past the tenant's
    tracked-user limit are neither stored nor broadcast. Returns how many were accepted
    (or already known) and how many were left out by the limit."""
    blocked = ingest.users_past_limit(session, tenant_id, [e.user_id for e in events], test=test, now=now)
    kept = [e for e in events if e.user_id not in blocked] if blocked else events
    if not kept:
        return 0, len(events)
    outbox.record_many(session, tenant_id, [
        (e.type, {"user_id": e.user_id, "data": e.data, "timestamp": (e.timestamp or now).isoformat()})
        for e in kept], now=now, test=test)
    result = ingest.ingest(session, tenant_id, [ingest.Incoming(user_id=e.user_id, event=e.type, properties=e.data,
                                                                timestamp=e.timestamp) for e in kept],
                           source="external", test=test, now=now)
    return result.accepted + result.duplicates, len(events) - len(kept)
