"""The reads and writes of ingest as fixed statements, so that a batch costs a handful of
round trips whatever its size: on PostgreSQL two, `store` and `write` (with the score
snapshots and outbox rows folded into it), one for a replay. On PostgreSQL the rows of a statement travel as one JSON
document unpacked by `json_to_recordset` (one C-encoded string: binary arrays cost a
Python call per element, text arrays escape every element), event ids come with the rows
(db.new_ids: PostgreSQL's gen_random_uuid cost 0.3 ms of its CPU a batch of 50), and
being the same text every time each statement is prepared once per connection; the
short id lists of the reads go as arrays. SQLite runs the same work through SQLAlchemy
Core, row by row.

These statements bypass the ORM, and with it the session's tenant filter: each one
names its tenant itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from operator import attrgetter

import pydantic_core
from sqlalchemy import JSON, DateTime, Float, Integer, String, bindparam, exists, select, text, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.orm import Session

from ..db import new_id, new_ids
from ..interventions.models import OPEN, Intervention
from ..playbooks.models import Playbook
from ..tenants.models import Tenant
from ..webhooks.models import WebhookEndpoint
from . import fields
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
    # created by this batch's first statement (`store`): the write counts it in the
    # tenant's tracked users
    new: bool = False


# Derived from the one list of customer fields (fields.py) and the model's column types.
# What events set on a user ($identify, $locale): the fields a re-score does not compute.
SET_BY_EVENTS = tuple(f for f in fields.ALL if f not in (*fields.SCORES, *fields.STANDING)
                      and fields.FIELDS[f] != "time")
# what a re-score reads: those, the traits, the standing it compares against, and its inputs
READ = ("id", *SET_BY_EVENTS, "traits", *fields.STANDING, "created_at", "scored_at", "state")


def _pg_type(column: str) -> str:
    """The PostgreSQL type json_to_recordset reads a column of `customers` as."""
    kind = Customer.__table__.c[column].type
    kind = getattr(kind, "impl", kind)   # AutoString, UTCDateTime: decorators of String, DateTime
    for base, name in ((Integer, "int"), (Float, "float8"), (JSON, "json"), (DateTime, "timestamptz"),
                       (String, "text")):
        if isinstance(kind, base):
            return name
    raise TypeError(f"customers.{column}: no PostgreSQL type for {kind!r}")


# (column, PostgreSQL type) of what a re-score writes back: every field, and the rest it sets
WRITE = tuple((name, _pg_type(name)) for name in (*fields.ALL, "traits", "scored_at", "updated_at", "state"))
JSON_COLUMNS = ("traits", "state")


def postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"



def _cursor(session: Session):
    """A cursor on the session's own connection, inside its transaction."""
    return session.connection().connection.driver_connection.cursor()


def _utc(value: datetime | None) -> datetime | None:
    return value.astimezone(timezone.utc) if value is not None else None


# --- events ---------------------------------------------------------------------------

_insert_event = (sqlite.insert(Event.__table__)
                 .on_conflict_do_nothing(index_elements=["tenant_id", "idempotency_key"],
                                         index_where=Event.__table__.c.idempotency_key.isnot(None)))


def insert_events(session: Session, tenant_id: str, rows: list[dict], *, source: str, test: bool,
                  now: datetime) -> list[dict]:
    """SQLite: insert events (dicts of user_id, event, properties, timestamp,
    idempotency_key; no two with one key), those whose key the tenant has seen dropped;
    returns the rows inserted (the very dicts given). PostgreSQL does this in `store`."""
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

# the ids given (`ids`) with their tenant, for the probes of _locked_rows and PG_KNOWN
_IDS = "ids AS MATERIALIZED (SELECT x.id, %(tenant)b::text AS tenant_id FROM unnest(%(ids)b::text[]) AS x(id))"

# the ids that name a customer, each one a probe of the key (as _locked_rows, below, says
# why the tenant comes from the CTE's rows)
PG_KNOWN = (f"WITH {_IDS} SELECT u.id FROM ids AS u "
            "WHERE EXISTS (SELECT 1 FROM customers AS c WHERE c.tenant_id = u.tenant_id AND c.id = u.id)")

PG_INSERT_CUSTOMERS = """
INSERT INTO customers (tenant_id, id, traits, state, opted_out, lifecycle_stage, risk_level, health,
                       activation_score, engagement_score, expansion_score, created_at, updated_at, test)
SELECT %(tenant)b, x.id, '{}', '{}', '[]', 'new', 'low', 0, 0, 0, 0, %(now)b, %(now)b, %(test)b
FROM unnest(%(ids)b::text[]) AS x(id)
ORDER BY x.id
ON CONFLICT (tenant_id, id) DO NOTHING
RETURNING id
"""

# The rows of users, locked one by one in id order: the ids sorted by PostgreSQL (its
# collation orders every other lock on customers) drive a LATERAL probe of customers by
# key with FOR UPDATE, a form the planner can neither flatten nor turn around: each probe
# finds one row through the primary key. As a join of customers to the id list (`id =
# ANY(...)` or a join to unnest), the plan followed the statistics: with those of a small
# or new tenant it scanned every customer of the tenant and matched each against the list
# (3 ms a batch at 3,000 users, growing with the tenant). The tenant comes into the probe
# from the rows of a materialized CTE, whose values the planner cannot see, not as a
# constant: against a constant it takes the tenant's share of the rows from the
# statistics, and for a tenant they do not know yet (a new one, before the next ANALYZE,
# which on a large table comes after a tenth of it has changed) that share is nothing,
# so any index led by tenant_id looked as good as the key, and ix_customers_created,
# taken, read all the tenant's entries for every user (0.9 ms of a batch's 2.9 at 10,000
# users). From a row, the planner counts on a tenant's average share. `ids` names a
# materialized CTE of (id, tenant_id), the ids to lock.
def _locked_rows(ids: str) -> str:
    return f"""SELECT {', '.join('c.' + name for name in READ)}
    FROM (SELECT id, tenant_id FROM {ids} ORDER BY id) AS u,
         LATERAL (SELECT {', '.join(READ)} FROM customers
                  WHERE tenant_id = u.tenant_id AND id = u.id FOR UPDATE) AS c"""


PG_LOCK = f"""
WITH {_IDS}
SELECT {', '.join(READ)},
       EXISTS (SELECT 1 FROM playbooks WHERE tenant_id = %(tenant)b AND status = 'active'),
       EXISTS (SELECT 1 FROM webhook_endpoints WHERE tenant_id = %(tenant)b AND active),
       EXISTS (SELECT 1 FROM interventions WHERE tenant_id = %(tenant)b AND {OPEN})
FROM ({_locked_rows("ids")}) AS locked
"""

PG_COUNT_USERS = "UPDATE tenants SET tracked_users = tracked_users + %(delta)b WHERE id = %(tenant)b"
# the same, as a part of the write (`write`): the users `store` created
PG_COUNT_NEW = "UPDATE tenants SET tracked_users = tracked_users + %(created)s WHERE id = %(tenant)s"

# The re-scored users written back as an upsert on the primary key: every row exists and
# this transaction holds its lock (`store`, `lock`), so each one takes the ON CONFLICT
# branch, which finds it through the key's index whatever the planner's statistics say.
# As an UPDATE joined to the rows, the plan depended on them: json_to_recordset is
# estimated at 100 rows, and with the statistics of a table never analyzed yet (a new
# tenant's first burst, before autovacuum's first ANALYZE) it scanned the index entries
# of all the tenant's customers every batch. The insert's own values (created_at, test)
# would only be used for a user missing, which a locked row cannot be.
PG_WRITE = (
    "INSERT INTO customers AS c (tenant_id, id, " + ", ".join(name for name, _ in WRITE) + ", created_at, test) "
    "SELECT %(tenant)s, x.id, " + ", ".join(f"x.{name}" for name, _ in WRITE) + ", x.updated_at, %(test)s "
    "FROM json_to_recordset(%(rows)s::json) AS x(id text, " + ", ".join(f"{name} {kind}" for name, kind in WRITE)
    + ") ORDER BY x.id "
    "ON CONFLICT (tenant_id, id) DO UPDATE SET " + ", ".join(f"{name} = excluded.{name}" for name, _ in WRITE)
)

_customers = Customer.__table__
_insert_customer = sqlite.insert(_customers).on_conflict_do_nothing(index_elements=["tenant_id", "id"])
_write_customer = (update(_customers)
                   .where(_customers.c.tenant_id == bindparam("tenant"), _customers.c.id == bindparam("uid"))
                   .values({name: bindparam(f"v_{name}") for name, _ in WRITE}))


def known(session: Session, tenant_id: str, user_ids: list[str]) -> set[str]:
    if postgres(session):
        with _cursor(session) as cur:
            cur.execute(PG_KNOWN, {"tenant": tenant_id, "ids": user_ids})
            return {row[0] for row in cur.fetchall()}
    return set(session.execute(select(_customers.c.id).where(
        _customers.c.tenant_id == tenant_id, _customers.c.id.in_(user_ids))).scalars())


def create(session: Session, tenant_id: str, user_ids: list[str], *, test: bool, now: datetime) -> list[str]:
    """Create the users not there yet, unscored; returns those this call created."""
    user_ids = sorted(user_ids)   # racing creators wait for each other in one order
    if postgres(session):
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
    """SQLite: `create`, and the tenant's tracked-user count moved by as many (for a
    tenant without a limit, whose seats are not reserved ahead)."""
    created = create(session, tenant_id, user_ids, test=test, now=now)
    if created:
        count_users(session, tenant_id, len(created))
    return created


# --- a batch's first statement: events, new users, the users' rows -----------------------

# The events inserted, the users they name claimed, and the rows of those that existed
# read, with who follows the tenant's changes: one round trip. `claimed` takes every user
# of the batch in one id order, whether it creates the row (a tenant without a limit:
# seats are not reserved ahead; the tenant's count moves with the batch's write, so that
# the tenant's row is locked only from then to commit) or finds it there: an ON CONFLICT
# DO UPDATE whose WHERE is false updates nothing but locks the row it finds, also one a
# racing batch created after this statement's snapshot (it waits for that insert to
# commit). Taking created and existing users in two passes (lock the existing, then
# insert the new, then lock those racers had made meanwhile) deadlocked two batches
# that overlap: each held a user the other reached for next. `locked` then reads the
# rows that existed with FOR UPDATE, a lock already held that returns the newest
# version; it runs after `claimed` because the statement reads `claimed` rows first
# (UNION ALL runs its branches in order). A row created meanwhile by a racing batch is in
# neither `locked` (not in the snapshot) nor `claimed`'s output (not created here):
# `store` reads it with PG_LOCK, a second round trip, only then, and waits for no one.
# Rows come back tagged: n a user created, c a locked user's columns, e an event stored
# (key, user), f the followers.
_PAD = ", ".join(["NULL"] * len(READ))
PG_STORE = f"""
WITH ev AS (
    INSERT INTO events (id, tenant_id, user_id, event, properties, "timestamp", received_at, source, test,
                        idempotency_key)
    SELECT x.id, %(tenant)s, x.user_id, x.event, x.properties, x.ts, %(now)s, %(source)s, %(test)s, x.key
    FROM json_to_recordset(%(rows)s::json) AS x(id text, user_id text, event text, properties json,
                                                ts timestamptz, key text)
    ORDER BY x.key
    ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING idempotency_key, user_id
),
users AS (SELECT DISTINCT user_id AS id, %(tenant)s::text AS tenant_id FROM ev),
claimed AS (
    INSERT INTO customers (tenant_id, id, traits, state, opted_out, lifecycle_stage, risk_level, health,
                           activation_score, engagement_score, expansion_score, created_at, updated_at, test)
    SELECT %(tenant)s, u.id, '{{}}', '{{}}', '[]', 'new', 'low', 0, 0, 0, 0, %(now)s, %(now)s, %(test)s
    FROM users AS u WHERE %(create)s
    ORDER BY u.id
    ON CONFLICT (tenant_id, id) DO UPDATE SET id = excluded.id WHERE false
    RETURNING id
),
locked AS (
    {_locked_rows("users")}
)
SELECT 'n', NULL, id, {", ".join(["NULL"] * (len(READ) - 1))}, NULL::bool, NULL::bool, NULL::bool FROM claimed
UNION ALL SELECT 'c', NULL, {', '.join(READ)}, NULL, NULL, NULL FROM locked
UNION ALL SELECT 'e', idempotency_key, user_id, {", ".join(["NULL"] * (len(READ) - 1))}, NULL, NULL, NULL FROM ev
UNION ALL SELECT 'f', NULL, {_PAD},
       EXISTS (SELECT 1 FROM playbooks WHERE tenant_id = %(tenant)s AND status = 'active'),
       EXISTS (SELECT 1 FROM webhook_endpoints WHERE tenant_id = %(tenant)s AND active),
       EXISTS (SELECT 1 FROM interventions WHERE tenant_id = %(tenant)s AND {OPEN})
WHERE EXISTS (SELECT 1 FROM ev)
"""


@dataclass(slots=True)
class Stored:
    """What `store` did: the rows inserted (the very dicts given), the users' rows
    (locked, or created by this batch), who follows the tenant's changes, and how many
    users it created."""

    inserted: list[dict]
    customers: list[CustomerRow]
    followers: Followers
    created: int = 0


def store(session: Session, tenant_id: str, rows: list[dict], *, source: str, test: bool, now: datetime,
          create: bool) -> Stored:
    """Insert the events, those whose key the tenant has seen dropped, and for the users
    of those stored: create the missing ones when `create` (counting them in the
    tenant's tracked users: on PostgreSQL by `write`, which gets them back marked `new`),
    lock and read the others (as `lock`). Rows go in key order, so racing batches with
    the same keys wait for each other in one order instead of deadlocking; users in id
    order, for the same reason. One round trip on PostgreSQL (PG_STORE)."""
    rows = sorted(rows, key=lambda r: r["idempotency_key"] or "")
    if not postgres(session):
        inserted = insert_events(session, tenant_id, rows, source=source, test=test, now=now)
        if not inserted:
            return Stored([], [], Followers(False, False, False))
        users = sorted({r["user_id"] for r in inserted})
        made = create_counted(session, tenant_id, users, test=test, now=now) if create else []
        customers, followers = lock(session, tenant_id, users)
        return Stored(inserted, customers, followers, len(made))
    with _cursor(session) as cur:
        cur.execute(PG_STORE, {
            "tenant": tenant_id, "now": now, "source": source, "test": test, "create": create,
            "rows": _json([{"id": i, "user_id": r["user_id"], "event": r["event"], "properties": r["properties"],
                            "ts": r["timestamp"], "key": r["idempotency_key"]} for i, r in zip(new_ids(len(rows)), rows)])})
        result = cur.fetchall()
    keys, users, customers, made = set(), set(), [], []
    followers = Followers(False, False, False)
    n = len(READ)
    for r in result:
        tag = r[0]
        if tag == "c":
            customers.append(_row(dict(zip(READ, r[2:2 + n])), utc=True))
        elif tag == "e":
            keys.add(r[1])
            users.add(r[2])
        elif tag == "n":
            made.append(r[2])
        else:
            followers = Followers(*r[2 + n:])
    inserted = [r for r in rows if r["idempotency_key"] is None or r["idempotency_key"] in keys]
    customers += [CustomerRow(id=u, created_at=now, new=True) for u in made]
    if missing := sorted(users - {c.id for c in customers}):   # created by a racing batch meanwhile, held
        customers += lock(session, tenant_id, missing)[0]
    customers.sort(key=lambda c: c.id)
    return Stored(inserted, customers, followers, len(made))


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
    if postgres(session):
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
    if postgres(session):
        with _cursor(session) as cur:
            cur.execute(PG_COUNT_USERS, {"tenant": tenant_id, "delta": delta})
        return
    tenants = Tenant.__table__
    session.execute(update(tenants).where(tenants.c.id == tenant_id)
                    .values(tracked_users=tenants.c.tracked_users + delta))


# the keys of a row of PG_WRITE's JSON, and their values read off a CustomerRow in one call
WRITTEN = ("id", *(name for name, _ in WRITE))
_written = attrgetter(*WRITTEN)


def write_params(tenant_id: str, rows: list[CustomerRow], *, test: bool) -> dict:
    return {"tenant": tenant_id, "test": test,
            "rows": _json([dict(zip(WRITTEN, _written(r))) for r in rows])}


def write(session: Session, tenant_id: str, rows: list[CustomerRow], *, test: bool,
          also: list[tuple[str, dict]] = ()) -> None:
    """Store the re-scored columns of these users. `also`: PostgreSQL statements and
    their parameters (snapshots.pg_part, outbox.service.pg_part) run in the same round
    trip, as data-modifying CTEs of one statement, which run whether or not it reads
    them (a parameter they share must have one value). Rows marked `new` (created by
    `store`) are counted in the tenant's tracked users in the same statement."""
    if not rows:
        return
    if postgres(session):
        params = write_params(tenant_id, rows, test=test)
        if created := sum(1 for r in rows if r.new):
            also = [*also, (PG_COUNT_NEW, {"tenant": tenant_id, "created": created})]
        for _, more in also:
            if any(params.get(k, v) != v for k, v in more.items()):
                raise ValueError(f"folded statements disagree on a parameter: {sorted(more)}")
            params.update(more)
        sql = PG_WRITE if not also else ("WITH " + ", ".join(
            f"w{i} AS ({part})" for i, part in enumerate([PG_WRITE, *(sql for sql, _ in also)])) + " SELECT 1")
        with _cursor(session) as cur:
            cur.execute(sql, params)
        return
    session.execute(_write_customer, [{"tenant": tenant_id, "uid": r.id, **{f"v_{n}": getattr(r, n) for n, _ in WRITE}}
                                      for r in rows])
