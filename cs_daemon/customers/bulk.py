"""The reads and writes of ingest as fixed statements, so that a batch costs a handful of
round trips whatever its size. On PostgreSQL each statement takes whole columns as
arrays (`unnest`), passed in binary (psycopg's text format escapes every element,
10 times the cost), and being the same text every time it is prepared once per
connection; SQLite runs the same work through SQLAlchemy Core, row by row.

These statements bypass the ORM, and with it the session's tenant filter: each one
names its tenant itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

from sqlalchemy import bindparam, exists, select, text, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.orm import Session

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
# (column, PostgreSQL array element type) of what a re-score writes back
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
SELECT x.id, %(tenant)b, x.user_id, x.event, x.properties::json, x.ts, %(now)b, %(source)b, %(test)b, x.key
FROM unnest(%(ids)b::text[], %(users)b::text[], %(events)b::text[], %(props)b::text[],
            %(ts)b::timestamptz[], %(keys)b::text[]) AS x(id, user_id, event, properties, ts, key)
ORDER BY x.key
ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id
"""

_insert_event = (sqlite.insert(Event.__table__)
                 .on_conflict_do_nothing(index_elements=["tenant_id", "idempotency_key"],
                                         index_where=Event.__table__.c.idempotency_key.isnot(None)))


def insert_events(session: Session, tenant_id: str, rows: list[dict], *, source: str, test: bool,
                  now: datetime) -> set[str]:
    """Insert events (dicts of id, user_id, event, properties, timestamp, idempotency_key),
    those whose key the tenant has seen dropped; returns the ids of the rows inserted.
    Rows go in key order, so racing batches with the same keys wait for each other in
    one order instead of deadlocking."""
    rows = sorted(rows, key=lambda r: r["idempotency_key"] or "")
    if _postgres(session):
        with _cursor(session) as cur:
            cur.execute(PG_INSERT_EVENTS, {
                "tenant": tenant_id, "now": now, "source": source, "test": test,
                "ids": [r["id"] for r in rows], "users": [r["user_id"] for r in rows],
                "events": [r["event"] for r in rows], "props": [json.dumps(r["properties"]) for r in rows],
                "ts": [r["timestamp"] for r in rows], "keys": [r["idempotency_key"] for r in rows]})
            return {row[0] for row in cur.fetchall()}
    inserted = set()
    for r in rows:
        done = session.execute(_insert_event, {**r, "tenant_id": tenant_id, "received_at": now,
                                               "source": source, "test": test})
        if done.rowcount:
            inserted.add(r["id"])
    return inserted


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
    + ", ".join(f"{name} = x.{name}" + ("::json" if kind == "json" else "") for name, kind in WRITE)
    + " FROM unnest(%(id)b::text[], "
    + ", ".join(f"%({name})b::{'text' if kind == 'json' else kind}[]" for name, kind in WRITE)
    + ") AS x(id, " + ", ".join(name for name, _ in WRITE) + ")"
    + " WHERE c.tenant_id = %(tenant)b AND c.id = x.id"
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


def write(session: Session, tenant_id: str, rows: list[CustomerRow]) -> None:
    """Store the re-scored columns of these users."""
    if not rows:
        return
    if _postgres(session):
        params = {"tenant": tenant_id, "id": [r.id for r in rows]}
        for name, kind in WRITE:
            values = [getattr(r, name) for r in rows]
            if kind == "json":
                values = [json.dumps(v) for v in values]
            elif kind == "float8":
                values = [float(v) for v in values]   # one element type for the binary array
            params[name] = values
        with _cursor(session) as cur:
            cur.execute(PG_WRITE, params)
        return
    session.execute(_write_customer, [{"tenant": tenant_id, "uid": r.id, **{f"v_{n}": getattr(r, n) for n, _ in WRITE}}
                                      for r in rows])
