"""Domain events: what a service did, told to whoever the composition root
(cs_daemon/wiring.py) registered for it, in the same unit of work. A service records the
fact (`publish`) without knowing who reacts, so the domains it would otherwise have to
call (and that call it back) stay out of its imports: ingest does not import the
decisions it makes owed (docs/architecture.md, "Domain events")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from sqlalchemy.orm import Session


@dataclass(frozen=True)
class EventsIngested:
    """Users received new events while the tenant has active playbooks (ingest read that
    in this transaction: a handler need not read it again): `touched` maps each user id
    to (the event names, whether the user's state changed)."""
    tenant_id: str
    touched: dict[str, tuple[set[str], bool]]
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
    """The handlers run now, in the caller's transaction: what they write commits or rolls
    back with the event's cause."""
    for handler in _handlers.get(type(event), ()):
        handler(session, event)
