"""The baseline of bench/ingest.py: the same rows written with raw psycopg, nothing else.

One transaction a batch, two statements:

1. the events, all at once from arrays (`INSERT ... SELECT FROM unnest(...)`), duplicates
   of an idempotency key dropped by `ON CONFLICT ... DO NOTHING`, `RETURNING` the users
   and times of the rows really inserted; rows go in idempotency-key order, so two
   batches carrying the same keys (a retry racing its original) wait for each other in
   one order and cannot deadlock;
2. one upsert of the per-user state of those users into customers (created on first
   sight; otherwise `last_activity_at = GREATEST(...)`, `updated_at`), users sorted so
   that concurrent batches lock customers rows in one order.

No HTTP, no authentication, no validation, no scoring: the floor the service is
measured against. Same schema (the migrated one), same corpus, same batches.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import psycopg
from psycopg import errors as pg_errors

EVENTS_SQL = """
INSERT INTO events (id, tenant_id, user_id, event, properties, "timestamp", received_at,
                    source, test, idempotency_key)
SELECT x.id, %(tenant)s, x.user_id, x.event, x.properties::json, x.ts, %(now)s, 'api', false, x.key
FROM unnest(%(ids)s::text[], %(users)s::text[], %(events)s::text[], %(props)s::text[],
            %(ts)s::timestamptz[], %(keys)s::text[]) AS x(id, user_id, event, properties, ts, key)
ORDER BY x.key
ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING user_id, "timestamp"
"""

CUSTOMERS_SQL = """
INSERT INTO customers (tenant_id, id, traits, state, lifecycle_stage, health, activation_score,
                       engagement_score, expansion_score, risk_level, last_activity_at,
                       created_at, updated_at, test)
SELECT %(tenant)s, x.id, '{}', '{}', 'new', 0, 0, 0, 0, 'low', x.last, %(now)s, %(now)s, false
FROM unnest(%(ids)s::text[], %(last)s::timestamptz[]) AS x(id, last)
ON CONFLICT (tenant_id, id) DO UPDATE SET
    last_activity_at = GREATEST(customers.last_activity_at, EXCLUDED.last_activity_at),
    updated_at = EXCLUDED.updated_at
"""

RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)


def write_batch(conn: psycopg.Connection, tenant_id: str, users: list[str], events: list[str],
                props: list[str], ts: list[str], keys: list[str]) -> tuple[int, int]:
    """One batch in one transaction; returns (events inserted, users upserted)."""
    now = datetime.now(timezone.utc)
    with conn.cursor() as cur:
        cur.execute(EVENTS_SQL, {"tenant": tenant_id, "now": now,
                                 "ids": [str(uuid.uuid4()) for _ in users], "users": users,
                                 "events": events, "props": props, "ts": ts, "keys": keys})
        rows = cur.fetchall()
        last: dict[str, datetime] = {}
        for user, at in rows:
            seen = last.get(user)
            if seen is None or at > seen:
                last[user] = at
        if last:
            ids = sorted(last)
            cur.execute(CUSTOMERS_SQL, {"tenant": tenant_id, "now": now, "ids": ids,
                                        "last": [last[u] for u in ids]})
    conn.commit()
    return len(rows), len(last)


def write_batch_retrying(conn: psycopg.Connection, tenant_id: str, batch, attempts: int = 3
                         ) -> tuple[int, int, int]:
    """write_batch, retried on a deadlock or serialization failure; returns
    (inserted, users, retries)."""
    for attempt in range(attempts):
        try:
            inserted, users = write_batch(conn, tenant_id, *batch)
            return inserted, users, attempt
        except RETRYABLE:
            conn.rollback()
            if attempt + 1 == attempts:
                raise
    raise AssertionError("unreachable")


def force_stats_flush(conn: psycopg.Connection) -> None:
    """Make this backend publish its table statistics now (PostgreSQL 15+), so that
    pg_stat_user_tables read right after shows this connection's writes."""
    try:
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.commit()
    except pg_errors.UndefinedFunction:
        conn.rollback()
