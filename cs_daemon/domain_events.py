"""Domain events: what a service did, recorded on the unit of work (cs_daemon/uow.py) and
told to whoever the composition root (cs_daemon/wiring.py) registered for it, in the same
transaction. A service records the fact (`publish`) without knowing who reacts, so the
domains it would otherwise have to call (and that call it back) stay out of its imports:
ingest imports neither the decisions it makes owed, nor the interventions whose outcomes
its events settle, nor the webhooks its changes fan out to
(docs/architecture.md, "The unit of work and domain events").

An event carries what its publisher already computed, so a handler need not read it
again: ingest's hot path keeps its two statements per batch."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from sqlalchemy.orm import Session

from .uow import uow_of


@dataclass(frozen=True)
class EventsIngested:
    """Users received new events while the tenant has active playbooks (ingest read that
    in this transaction: a handler need not read it again): `touched` maps each user id
    to (the event names, whether the user's state changed)."""
    tenant_id: str
    touched: dict[str, tuple[set[str], bool]]
    now: datetime
    test: bool


@dataclass(frozen=True)
class EventsStored:
    """Events were stored for users some of whom have open interventions (ingest read that
    in this transaction), and the users' state already counts them: `events` are (user
    id, event name, timestamp). Published before the outbox rows of the changes these
    events made are written (their order since the start)."""
    tenant_id: str
    events: list[tuple[str, str, datetime]]
    now: datetime
    test: bool


@dataclass(frozen=True)
class OutboxRowsWritten:
    """Rows of the event log (`outbox_events`) were written in this transaction, and the
    tenant may have endpoints subscribed to them: `rows` are the rows as written (id,
    event_type, payload, ...), for their webhooks to be made now."""
    tenant_id: str
    rows: list[dict]
    now: datetime
    test: bool


Handler = Callable[[Session, object], None]
_handlers: dict[type, list[Handler]] = {}


def handle(event_type: type, handler: Handler) -> None:
    """Run `handler(session, event)` for each event of that type (once per handler)."""
    handlers = _handlers.setdefault(event_type, [])
    if handler not in handlers:
        handlers.append(handler)


def publish(session: Session, event: object) -> None:
    """Record `event` on the session's unit of work; its handlers run now, in the caller's
    transaction, in the order they were registered: what they write commits or rolls back
    with the event's cause."""
    uow_of(session).events.append(event)
    for handler in _handlers.get(type(event), ()):
        handler(session, event)
