"""Domain events: what a service did, recorded on the unit of work (cs_daemon/uow.py) and
told to whoever the composition root (cs_daemon/wiring.py) registered for it. A service
records the fact (`publish`) without knowing who reacts, so the domains it would
otherwise have to call (and that call it back) stay out of its imports: ingest imports
neither the decisions it makes owed, nor the interventions whose outcomes its events
settle, nor the webhooks its changes fan out to; the delivery service and the decision
requests import none of the jobs that send what they wrote
(docs/architecture.md, "The unit of work and domain events").

Two kinds of handler: one registered with `handle` runs in the publisher's transaction,
as the event is published (what it writes commits or rolls back with its cause); one
registered with `handle_after_commit` runs once the transaction has committed (never
after a rollback), with every event of its types the transaction published, in one call:
the jobs and wake-ups that hurry along work already durable as rows.

An event carries what its publisher already computed, so a handler need not read it
again: ingest's hot path keeps its two statements per batch."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable

from sqlalchemy.orm import Session

from .config import Settings
from .uow import uow_of

# --- handled in the publisher's transaction -------------------------------------------


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


# --- handled after commit: the committed rows wait for a job or a wake-up -------------
# Each is only a hurry: the rows are durable, and a periodic sweep picks up what a lost
# message, or a broker out of reach, leaves (docs/deploy.md, "When Redis is unreachable").


@dataclass(frozen=True)
class DeliveryDue:
    """A delivery was written to be sent now (`delivery.service.create`): once it has
    committed, a job is to send it. Made row by row, the deliveries of one transaction
    reach the handler together, to travel in job messages of several each."""
    delivery_id: str


@dataclass(frozen=True)
class DeliveryRetryDue:
    """An attempt of the delivery failed and the next is due in `delay`
    (`delivery.service.record`)."""
    delivery_id: str
    delay: timedelta


@dataclass(frozen=True)
class DecisionsOwed:
    """Decision requests were written for a job to decide (`decisions.requests.owe`; not
    the sweep's, which it decides itself)."""
    request_ids: list[str]


@dataclass(frozen=True)
class InAppInterventionWithdrawn:
    """An in-app intervention was rolled back, and its message, if queued, withdrawn
    (`channels.in_app.withdraw`): the user's open streams are to read what changed."""
    tenant_id: str
    user_id: str


Handler = Callable[[Session, object], None]
# after commit: (the events of the transaction, the session's settings)
AfterCommitHandler = Callable[[list, Settings | None], None]
_handlers: dict[type, list[Handler]] = {}
_after_commit: dict[type, list[AfterCommitHandler]] = {}


def handle(event_type: type, handler: Handler) -> None:
    """Run `handler(session, event)` for each event of that type (once per handler), in
    the publisher's transaction."""
    handlers = _handlers.setdefault(event_type, [])
    if handler not in handlers:
        handlers.append(handler)


def handle_after_commit(event_type: type, handler: AfterCommitHandler) -> None:
    """Run `handler(events, settings)` once the transaction that published events of that
    type has committed, with all of them in one call, in the order published (a handler
    registered for several types gets theirs in the same list); never after a rollback.
    `settings`: the session's (db.session_scope). A handler that raises is logged, and the
    commit stands (db.py, `_after_commit`)."""
    handlers = _after_commit.setdefault(event_type, [])
    if handler not in handlers:
        handlers.append(handler)


def publish(session: Session, event: object) -> None:
    """Record `event` on the session's unit of work; its handlers run now, in the caller's
    transaction, in the order they were registered: what they write commits or rolls back
    with the event's cause. Its after-commit handlers get it once the transaction has
    committed (kept on the unit of work meanwhile, and dropped with it on rollback)."""
    uow = uow_of(session)
    uow.events.append(event)
    for handler in _handlers.get(type(event), ()):
        handler(session, event)
    for handler in _after_commit.get(type(event), ()):
        uow.collect(handler, event, uow.settings)
