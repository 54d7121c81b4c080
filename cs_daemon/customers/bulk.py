"""The reads and writes of ingest as fixed statements, so that a batch costs a handful of
round trips whatever its size. On PostgreSQL the rows of a statement travel as one JSON
document unpacked by `json_to_recordset` (one C-encoded string: binary arrays cost a
Python call per element, text arrays escape every element), ids are made by the server,
and being the same text every time each statement is prepared once per connection; the
short id lists of the reads go as arrays. SQLite runs the same work through SQLAlchemy
Core, row by row.

These statements bypass the ORM, and with it the session's tenant filter: each one
names its tenant itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

import pydantic_core
from sqlalchemy import bindparam, exists, select, text, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.orm import Session

from ..db import new_id
from ..interventions.models import OPEN, Intervention
from ..playbooks.models import Playbook
from ..tenants.models import Tenant
from ..webhooks.models import WebhookEndpoint
from .models import Customer, Event


@dataclass(slots=True)
class CustomerRow:
    """The columns of a customer that ingest reads and re-scores (state.py works on it as
    on the model)."""

    id: str
    name: str | None = None
    email: str | None = None
    company: str | None = None
    role: str | None = None
    team_size: int | None = None
    locale: str | None = None
    traits: dict = field(default_factory=dict)
    lifecycle_stage: str = "new"
    risk_level: str = "low"
    health: float = 0.0
    activation_score: float = 0.0
    engagement_score: float = 0.0
    expansion_score: float = 0.0
    last_activity_at: datetime | None = None
    created_at: datetime | None = None
    scored_at: datetime | None = None
    updated_at: datetime | None = None
    state: dict = field(default_factory=dict)


READ = ("id", "name", "email", "company", "role", "team_size", "locale", "traits", "lifecycle_stage",
        "risk_level", "created_at", "scored_at", "state")
# (column, PostgreSQL type) of what a re-score writes back
WRITE = (("name", "text"), ("email", "text"), ("company", "text"), ("role", "text"), ("team_size", "int"),
         ("locale", "text"), ("traits", "json"), ("lifecycle_stage", "text"), ("risk_level", "text"),
         ("health", "float8"), ("activation_score", "float8"), ("engagement_score", "float8"),
         ("expansion_score", "float8"), ("last_activity_at", "timestamptz"), ("scored_at", "timestamptz"),
         ("updated_at", "timestamptz"), ("state", "json"))
JSON_COLUMNS = ("traits", "state")


def _postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def _cursor(session: Session):
    """A cursor on the session's own connection, inside its transaction."""
    return session.connection().connection.driver_connection.cursor()


def _utc(value: datetime | None) -> datetime | None:
    return value.astimezone(timezone.utc) if value is not None else None


# --- events ---------------------------------------------------------------------------

PG_INSERT_EVENTS = """
INSERT INTO events (id, tenant_id, user_id, event, properties, "timestamp", received_at, source, test,
                    idempotency_key)
SELECT gen_random_uuid()::text, %(tenant)s, x.user_id, x.event, x.properties, x.ts, %(now)s, %(source)s,
       %(test)s, x.key
FROM json_to_recordset(%(rows)s::json) AS x(user_id text, event text, properties json, ts timestamptz, key text)
ORDER BY x.key
ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING idempotency_key
"""

_insert_event = (sqlite.insert(Event.__table__)
                 .on_conflict_do_nothing(index_elements=["tenant_id", "idempotency_key"],
                                         index_where=Event.__table__.c.idempotency_key.isnot(None)))


def insert_events(session: Session, tenant_id: str, rows: list[dict], *, source: str, test: bool,
                  now: datetime) -> list[dict]:
    """Insert events (dicts of user_id, event, properties, timestamp, idempotency_key; no
    two with one key), those whose key the tenant has seen dropped; returns the rows
    inserted (the very dicts given). Rows go in key order, so racing batches with the same keys wait for each
    other in one order instead of deadlocking."""
    rows = sorted(rows, key=lambda r: r["idempotency_key"] or "")
    if _postgres(session):
        with _cursor(session) as cur:
            cur.execute(PG_INSERT_EVENTS, {
                "tenant": tenant_id, "now": now, "source": source, "test": test,
                "rows": _json([{"user_id": r["user_id"], "event": r["event"], "properties": r["properties"],
                                "ts": r["timestamp"], "key": r["idempotency_key"]} for r in rows])})
            stored = {row[0] for row in cur.fetchall()}
        return [r for r in rows if r["idempotency_key"] is None or r["idempotency_key"] in stored]
    inserted = []
    for r in rows:
        done = session.execute(_insert_event, {**r, "id": new_id(), "tenant_id": tenant_id, "received_at": now,
                                               "source": source, "test": test})
        if done.rowcount:
            inserted.append(r)
    return inserted


def _json(rows: list[dict]) -> str:
    """Rows as one JSON document for json_to_recordset: one string instead of a binary
    array per column, each element dumped in Python. pydantic-core's encoder writes the
    datetimes itself (json.dumps would call back into Python for each: 4x slower)."""
    return pydantic_core.to_json(rows).decode()


# --- customers ------------------------------------------------------------------------

PG_KNOWN = "SELECT id FROM customers WHERE tenant_id = %(tenant)b AND id = ANY(%(ids)b::text[])"

PG_INSERT_CUSTOMERS = """
INSERT INTO customers (tenant_id, id, traits, state, opted_out, lifecycle_stage, risk_level, health,
                       activation_score, engagement_score, expansion_score, created_at, updated_at, test)
SELECT %(tenant)b, x.id, '{}', '{}', '[]', 'new', 'low', 0, 0, 0, 0, %(now)b, %(now)b, %(test)b
FROM unnest(%(ids)b::text[]) AS x(id)
ORDER BY x.id
ON CONFLICT (tenant_id, id) DO NOTHING
RETURNING id
"""

# the same insert, and the tenant's count of tracked users moved by the rows it made, in
# one round trip (a data-modifying CTE runs whether or not the query reads it)
PG_INSERT_COUNTED_CUSTOMERS = f"""
WITH created AS ({PG_INSERT_CUSTOMERS.strip()}),
counted AS (
    UPDATE tenants SET tracked_users = tracked_users + (SELECT count(*) FROM created)
    WHERE id = %(tenant)b AND EXISTS (SELECT 1 FROM created)
)
SELECT id FROM created
"""

PG_LOCK = f"""
SELECT {', '.join(READ)},
       EXISTS (SELECT 1 FROM playbooks WHERE tenant_id = %(tenant)b AND status = 'active'),
       EXISTS (SELECT 1 FROM webhook_endpoints WHERE tenant_id = %(tenant)b AND active),
       EXISTS (SELECT 1 FROM interventions WHERE tenant_id = %(tenant)b AND {OPEN})
FROM customers WHERE tenant_id = %(tenant)b AND id = ANY(%(ids)b::text[])
ORDER BY id FOR UPDATE
"""

PG_COUNT_USERS = "UPDATE tenants SET tracked_users = tracked_users + %(delta)b WHERE id = %(tenant)b"

PG_WRITE = (
    "UPDATE customers AS c SET "
    + ", ".join(f"{name} = x.{name}" for name, _ in WRITE)
    + " FROM json_to_recordset(%(rows)s::json) AS x(id text, "
    + ", ".join(f"{name} {kind}" for name, kind in WRITE) + ")"
    # the id list lets the primary key find the rows: json_to_recordset is estimated at
    # 100 rows, and joined on x.id alone the planner scanned all the tenant's customers
    + " WHERE c.tenant_id = %(tenant)s AND c.id = ANY(%(ids)s::text[]) AND c.id = x.id"
)

_customers = Customer.__table__
_insert_customer = sqlite.insert(_customers).on_conflict_do_nothing(index_elements=["tenant_id", "id"])
_write_customer = (update(_customers)
                   .where(_customers.c.tenant_id == bindparam("tenant"), _customers.c.id == bindparam("uid"))
                   .values({name: bindparam(f"v_{name}") for name, _ in WRITE}))


def known(session: Session, tenant_id: str, user_ids: list[str]) -> set[str]:
    if _postgres(session):
        with _cursor(session) as cur:
            cur.execute(PG_KNOWN, {"tenant": tenant_id, "ids": user_ids})
            return {row[0] for row in cur.fetchall()}
    return set(session.execute(select(_customers.c.id).where(
        _customers.c.tenant_id == tenant_id, _customers.c.id.in_(user_ids))).scalars())


def create(session: Session, tenant_id: str, user_ids: list[str], *, test: bool, now: datetime) -> list[str]:
    """Create the users not there yet, unscored; returns those this call created."""
    user_ids = sorted(user_ids)   # racing creators wait for each other in one order
    if _postgres(session):
        with _cursor(session) as cur:
            cur.execute(PG_INSERT_CUSTOMERS, {"tenant": tenant_id, "ids": user_ids, "now": now, "test": test})
            return [row[0] for row in cur.fetchall()]
    created = []
    for user_id in user_ids:
        done = session.execute(_insert_customer, {
            "tenant_id": tenant_id, "id": user_id, "traits": {}, "state": {}, "opted_out": [],
            "lifecycle_stage": "new", "risk_level": "low", "health": 0.0, "activation_score": 0.0,
            "engagement_score": 0.0, "expansion_score": 0.0, "created_at": now, "updated_at": now, "test": test})
        if done.rowcount:
            created.append(user_id)
    return created


def create_counted(session: Session, tenant_id: str, user_ids: list[str], *, test: bool,
                   now: datetime) -> list[str]:
    """`create`, and the tenant's tracked-user count moved by as many (for a tenant
    without a limit, whose seats are not reserved ahead)."""
    if not _postgres(session):
        created = create(session, tenant_id, user_ids, test=test, now=now)
        if created:
            count_users(session, tenant_id, len(created))
        return created
    with _cursor(session) as cur:
        cur.execute(PG_INSERT_COUNTED_CUSTOMERS, {"tenant": tenant_id, "ids": sorted(user_ids), "now": now,
                                                  "test": test})
        return [row[0] for row in cur.fetchall()]


@dataclass(frozen=True, slots=True)
class Followers:
    """Whether anything acts on the tenant's customer changes: an active playbook (a
    decision is owed), an active webhook endpoint (a delivery is made), a delivered
    intervention awaiting its outcome (a new event may be the user's response)."""

    playbooks: bool
    endpoints: bool
    open_interventions: bool = False


def lock(session: Session, tenant_id: str, user_ids: list[str]) -> tuple[list[CustomerRow], Followers]:
    """Read and lock the users' rows until commit, in id order (SQLite locks the whole
    database on the batch's first write, which precedes this), and in the same round
    trip who follows the tenant's changes."""
    if _postgres(session):
        with _cursor(session) as cur:
            cur.execute(PG_LOCK, {"tenant": tenant_id, "ids": user_ids})
            rows = cur.fetchall()
        n = len(READ)
        followers = Followers(*rows[0][n:]) if rows else Followers(False, False, False)
        return [_row(dict(zip(READ, r[:n])), utc=True) for r in rows], followers
    columns = [_customers.c[name] for name in READ]
    found = session.execute(select(*columns).where(_customers.c.tenant_id == tenant_id,
                                                   _customers.c.id.in_(user_ids)).order_by(_customers.c.id))
    return [_row(dict(r._mapping)) for r in found], _followers(session, tenant_id)


def _followers(session: Session, tenant_id: str) -> Followers:
    playbooks, endpoints, interventions = Playbook.__table__, WebhookEndpoint.__table__, Intervention.__table__
    row = session.execute(select(
        exists().where(playbooks.c.tenant_id == tenant_id, playbooks.c.status == "active"),
        exists().where(endpoints.c.tenant_id == tenant_id, endpoints.c.active.is_(True)),
        exists().where(interventions.c.tenant_id == tenant_id, text(OPEN)))).one()
    return Followers(*map(bool, row))


def _row(values: dict, utc: bool = False) -> CustomerRow:
    if utc:
        values["created_at"], values["scored_at"] = _utc(values["created_at"]), _utc(values["scored_at"])
    return CustomerRow(**values)


def count_users(session: Session, tenant_id: str, delta: int) -> None:
    """Move the tenant's tracked-user count (a plain UPDATE: the ORM's would also look for
    the tenant among the session's objects)."""
    if _postgres(session):
        with _cursor(session) as cur:
            cur.execute(PG_COUNT_USERS, {"tenant": tenant_id, "delta": delta})
        return
    tenants = Tenant.__table__
    session.execute(update(tenants).where(tenants.c.id == tenant_id)
                    .values(tracked_users=tenants.c.tracked_users + delta))


def write_params(tenant_id: str, rows: list[CustomerRow]) -> dict:
    return {"tenant": tenant_id, "ids": [r.id for r in rows],
            "rows": _json([{"id": r.id, **{name: getattr(r, name) for name, _ in WRITE}} for r in rows])}


def write(session: Session, tenant_id: str, rows: list[CustomerRow]) -> None:
    """Store the re-scored columns of these users."""
    if not rows:
        return
    if _postgres(session):
        with _cursor(session) as cur:
            cur.execute(PG_WRITE, write_params(tenant_id, rows))
        return
    session.execute(_write_customer, [{"tenant": tenant_id, "uid": r.id, **{f"v_{n}": getattr(r, n) for n, _ in WRITE}}
                                      for r in rows])
