"""Record events, in the caller's transaction: the event's row in the event log
(`outbox_events`) and one delivery per subscribed endpoint are written together, so a
committed event can never miss its webhooks, and no event waits to be fanned out
(docs/architecture.md, "The event log"). The deliveries are made by the handler of
`OutboxRowsWritten` the composition root registers (webhooks/service.py): this module
publishes the event and knows nothing of endpoints."""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import insert
from sqlalchemy.orm import Session

from .. import domain_events
from ..db import new_id
from .models import OutboxEvent

# PostgreSQL: all rows as one JSON document in one fixed statement (prepared once per connection)
PG_INSERT = """
INSERT INTO outbox_events (id, tenant_id, event_type, payload, test, created_at)
SELECT x.id, %(tenant)s, x.event_type, x.payload, %(test)s, %(now)s
FROM json_to_recordset(%(outbox)s::json) AS x(id text, event_type text, payload json)
"""


def record_many(session: Session, tenant_id: str, events: list[tuple[str, dict]], *,
                now: datetime, test: bool = False, fan_out: bool = True) -> list[str]:
    """`events` are (event_type, payload) pairs; each payload gets `event` = its type.
    Returns the event ids. `fan_out=False` is for a caller that knows the tenant has no
    active endpoint (it read that in this transaction)."""
    if not events:
        return []
    rows = rows_of(tenant_id, events, now=now, test=test)
    if session.get_bind().dialect.name == "postgresql":
        with session.connection().connection.driver_connection.cursor() as cur:
            cur.execute(*pg_part(tenant_id, rows, now=now, test=test))
    else:
        insert_rows(session, rows)
    if fan_out:
        domain_events.publish(session, domain_events.OutboxRowsWritten(tenant_id, rows, now, test))
    return [r["id"] for r in rows]


def rows_of(tenant_id: str, events: list[tuple[str, dict]], *, now: datetime, test: bool) -> list[dict]:
    """The outbox rows of `events` ((event_type, payload) pairs), ids made here."""
    return [{"id": new_id(), "tenant_id": tenant_id, "event_type": kind, "payload": {"event": kind, **payload},
             "test": test, "created_at": now} for kind, payload in events]


def pg_part(tenant_id: str, rows: list[dict], *, now: datetime, test: bool) -> tuple[str, dict]:
    """The PostgreSQL statement inserting `rows` and its parameters, which a caller may
    also run as a CTE of a statement of its own (customers/ingest.py does, folding the
    outbox into the customers' update)."""
    return PG_INSERT, {"tenant": tenant_id, "test": test, "now": now, "outbox": json.dumps(
        [{"id": r["id"], "event_type": r["event_type"], "payload": r["payload"]} for r in rows],
        separators=(",", ":"))}


def insert_rows(session: Session, rows: list[dict]) -> None:
    session.execute(insert(OutboxEvent.__table__), rows)


def record(session: Session, tenant_id: str, event_type: str, payload: dict, *, now: datetime,
           test: bool = False) -> str:
    return record_many(session, tenant_id, [(event_type, payload)], now=now, test=test)[0]
