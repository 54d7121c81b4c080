"""Daily score snapshots: each user's scores as they stood at the end of each day they
were scored (UTC days), for the health and engagement chart of a customer over time
(docs/console.md, "Health over time"). The customer row holds the scores of the day it
was last scored, so that day is stored only once it is over: the first re-score of a
later day (ingest or the score sweep, in the batch's own round trips) writes the
values the row held before it, dated the day they were scored. Rows older than
RETENTION_DAYS are dropped by the score sweep."""

from __future__ import annotations

from datetime import date, datetime, timedelta

from sqlalchemy import Column, Date, Float, Index, String, bindparam, delete, func, select
from sqlalchemy.dialects import sqlite
from sqlalchemy.orm import Session
from sqlmodel import Field

from ..db import TenantOwned
from . import fields
from .bulk import _cursor
from .models import Customer

RETENTION_DAYS = 90     # the longest chart the console draws
SCORES = fields.SCORES


class ScoreSnapshot(TenantOwned, table=True):
    __tablename__ = "score_snapshots"
    __table_args__ = (Index("ix_score_snapshots_day", "tenant_id", "day"),)   # the prune

    tenant_id: str = Field(foreign_key="tenants.id", primary_key=True, max_length=36)
    user_id: str = Field(primary_key=True, max_length=255)
    day: date = Field(sa_column=Column(Date, primary_key=True))
    health: float = Field(sa_column=Column(Float, nullable=False))
    activation_score: float = Field(sa_column=Column(Float, nullable=False))
    engagement_score: float = Field(sa_column=Column(Float, nullable=False))
    expansion_score: float = Field(sa_column=Column(Float, nullable=False))
    lifecycle_stage: str = Field(sa_column=Column(String(20), nullable=False))
    risk_level: str = Field(sa_column=Column(String(10), nullable=False))


COLUMNS = (*SCORES, *fields.STANDING)
_table = ScoreSnapshot.__table__
_customers = Customer.__table__

# The day's row is read from the customer row before its re-score: on PostgreSQL a CTE of
# the statement that updates it reads the statement's snapshot, the values before the update
PG_STORE = (
    "INSERT INTO score_snapshots (tenant_id, user_id, day, " + ", ".join(COLUMNS) + ") "
    "SELECT tenant_id, id, (scored_at AT TIME ZONE 'UTC')::date, " + ", ".join(COLUMNS) + " "
    "FROM customers WHERE tenant_id = %(tenant)s AND id = ANY(%(ended)s::text[]) ORDER BY id "
    "ON CONFLICT (tenant_id, user_id, day) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS)
)
_store = sqlite.insert(_table).from_select(
    ["tenant_id", "user_id", "day", *COLUMNS],
    select(_customers.c.tenant_id, _customers.c.id, func.date(_customers.c.scored_at),
           *(_customers.c[c] for c in COLUMNS))
    .where(_customers.c.tenant_id == bindparam("tenant"), _customers.c.id.in_(bindparam("ended", expanding=True))))
_store = _store.on_conflict_do_update(index_elements=["tenant_id", "user_id", "day"],
                                      set_={c: _store.excluded[c] for c in COLUMNS})


def ended(customers, *, now: datetime) -> list[str]:
    """The users, about to be re-scored at `now` (models or ingest rows), whose last scored
    day is over: their row holds its final scores, which `write` stores. Not those scored
    today already, nor those never scored."""
    today = now.date()
    return [c.id for c in customers if c.scored_at is not None and c.scored_at.date() < today]


def write(session: Session, tenant_id: str, user_ids: list[str]) -> None:
    """Store the scores of these users' rows as the snapshot of the day they were scored,
    before their re-score writes the rows (users of `ended`). A row written earlier for
    that day is overwritten: the values at the end of the day are the ones to keep."""
    if not user_ids:
        return
    if session.get_bind().dialect.name == "postgresql":
        with _cursor(session) as cur:
            cur.execute(*pg_part(tenant_id, user_ids))
        return
    session.execute(_store, {"tenant": tenant_id, "ended": user_ids})


def pg_part(tenant_id: str, user_ids: list[str]) -> tuple[str, dict]:
    """The PostgreSQL statement of `write` and its parameters, which ingest runs as a CTE
    of the customers' update (customers/ingest.py)."""
    return PG_STORE, {"tenant": tenant_id, "ended": user_ids}


def history(session: Session, user_id: str, *, days: int, now: datetime) -> list[ScoreSnapshot]:
    """The user's daily scores of the last `days` days, oldest first (a tenant session):
    the stored snapshots, and for the day the user was last scored its current scores,
    from the customer row (a snapshot not added to the session)."""
    since = now.date() - timedelta(days=days - 1)
    stored = {s.day: s for s in session.scalars(select(ScoreSnapshot).where(ScoreSnapshot.user_id == user_id,
                                                                          ScoreSnapshot.day >= since))}
    customer = session.execute(select(Customer.tenant_id, Customer.scored_at, *(getattr(Customer, c) for c in COLUMNS))
                               .where(Customer.id == user_id)).first()
    if customer is not None and customer.scored_at is not None and customer.scored_at.date() >= since:
        day = customer.scored_at.date()
        stored[day] = ScoreSnapshot(tenant_id=customer.tenant_id, user_id=user_id, day=day,
                                    **{c: getattr(customer, c) for c in COLUMNS})
    return [stored[day] for day in sorted(stored)]


def prune(session: Session, *, now: datetime) -> int:
    """Drop the tenant's snapshots older than RETENTION_DAYS (a tenant session)."""
    cutoff = now.date() - timedelta(days=RETENTION_DAYS)
    return session.execute(delete(ScoreSnapshot).where(ScoreSnapshot.day < cutoff)).rowcount or 0

