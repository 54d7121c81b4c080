"""Record events, in the caller's transaction: the event's row in the event log
(`outbox_events`) and one delivery per subscribed endpoint are written together, so a
committed event can never miss its webhooks, and no event waits to be fanned out
(docs/architecture.md, "The event log"). The deliveries are made by the handler of
`OutboxRowsWritten` the composition root registers (webhooks/service.py): this module
publishes the event and knows nothing of endpoints.

The log is read by `listing` (`cs events log`) and kept for each tenant's
`config.event_log_retention_days` (outbox/actors.py, flows/retention.py)."""

from __future__ import annotations

from datetime import datetime

import pydantic_core
from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from .. import domain_events
from ..db import new_ids
from .models import OutboxEvent

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000

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
    return [{"id": row_id, "tenant_id": tenant_id, "event_type": kind, "payload": {"event": kind, **payload},
             "test": test, "created_at": now} for row_id, (kind, payload) in zip(new_ids(len(events)), events)]


def pg_part(tenant_id: str, rows: list[dict], *, now: datetime, test: bool) -> tuple[str, dict]:
    """The PostgreSQL statement inserting `rows` and its parameters, which a caller may
    also run as a CTE of a statement of its own (customers/ingest.py does, folding the
    outbox into the customers' update). The rows go as one JSON document written by
    pydantic-core, as ingest's own rows do (customers/bulk.py)."""
    return PG_INSERT, {"tenant": tenant_id, "test": test, "now": now, "outbox": pydantic_core.to_json(
        [{"id": r["id"], "event_type": r["event_type"], "payload": r["payload"]} for r in rows]).decode()}


def insert_rows(session: Session, rows: list[dict]) -> None:
    session.execute(insert(OutboxEvent.__table__), rows)


def record(session: Session, tenant_id: str, event_type: str, payload: dict, *, now: datetime,
           test: bool = False) -> str:
    return record_many(session, tenant_id, [(event_type, payload)], now=now, test=test)[0]


# -- reading the log ---------------------------------------------------------------------------

def listing(session: Session, *, event_type: str | None = None, user_id: str | None = None,
            since: datetime | None = None, limit: int = DEFAULT_LIMIT) -> list[OutboxEvent]:
    """The events the service recorded for the session's tenant (whether or not an endpoint
    was subscribed), newest first, at most `limit`: of one type (`custom.*`, ending in `*`,
    is every type that starts with `custom.`), about one user (the payload's `user_id`),
    recorded at or after `since`. The (tenant_id, created_at) index serves the order and
    `since`; the type and the user are filters on that walk, so a rare user without
    `since` reads the tenant's whole log, which the retention keeps bounded."""
    query = (select(OutboxEvent).order_by(OutboxEvent.created_at.desc(), OutboxEvent.id.desc())
             .limit(max(1, min(limit, MAX_LIMIT))))
    if event_type:
        if event_type.endswith("*"):
            query = query.where(OutboxEvent.event_type.startswith(event_type[:-1], autoescape=True))
        else:
            query = query.where(OutboxEvent.event_type == event_type)
    if user_id:
        query = query.where(OutboxEvent.payload["user_id"].as_string() == user_id)
    if since is not None:
        query = query.where(OutboxEvent.created_at >= since)
    return list(session.scalars(query))


def public(row: OutboxEvent) -> dict:
    """One logged event as `cs events log --json` shows it."""
    user_id = row.payload.get("user_id") if isinstance(row.payload, dict) else None
    return {"id": row.id, "event_type": row.event_type, "user_id": user_id, "test": row.test,
            "created_at": row.created_at, "payload": row.payload}
