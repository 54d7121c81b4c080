"""Daily score snapshots: each user's scores as they stood at the end of each day they
were scored (UTC days), for the health and engagement chart of a customer over time
(docs/console.md, "Customers"). Ingest and the score sweep write them in the batch's
own round trips; a day's row is overwritten by each later re-score that day. Rows older
than RETENTION_DAYS are dropped by the score sweep."""

from __future__ import annotations

from datetime import date, datetime, timedelta

from sqlalchemy import Column, Date, Float, Index, String, delete, select
from sqlalchemy.dialects import sqlite
from sqlalchemy.orm import Session
from sqlmodel import Field

from ..db import TenantOwned
from . import fields
from .bulk import _cursor, _json

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

# the PostgreSQL statement: rows as one JSON document, as the rest of ingest sends them
PG_UPSERT = (
    "INSERT INTO score_snapshots (tenant_id, user_id, day, " + ", ".join(COLUMNS) + ") "
    "SELECT %(tenant)s, x.id, %(day)s, " + ", ".join(f"x.{c}" for c in COLUMNS) + " "
    "FROM json_to_recordset(%(snapshots)s::json) AS x(id text, health float8, activation_score float8, "
    "engagement_score float8, expansion_score float8, lifecycle_stage text, risk_level text) "
    "ORDER BY x.id "
    "ON CONFLICT (tenant_id, user_id, day) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS)
)

_table = ScoreSnapshot.__table__


def row(customer) -> dict:
    """The snapshot values of a re-scored customer (a model or an ingest row)."""
    return {"id": customer.id, **{c: getattr(customer, c) for c in COLUMNS}}


def write(session: Session, tenant_id: str, rows: list[dict], *, now: datetime) -> None:
    """Upsert today's snapshot of each user (dicts of `row`)."""
    if not rows:
        return
    day = now.date()
    if session.get_bind().dialect.name == "postgresql":
        with _cursor(session) as cur:
            cur.execute(*pg_part(tenant_id, rows, now=now))
        return
    stmt = sqlite.insert(_table)
    stmt = stmt.on_conflict_do_update(index_elements=["tenant_id", "user_id", "day"],
                                      set_={c: stmt.excluded[c] for c in COLUMNS})
    session.execute(stmt, [{"tenant_id": tenant_id, "user_id": r["id"], "day": day,
                            **{c: r[c] for c in COLUMNS}} for r in rows])


def pg_part(tenant_id: str, rows: list[dict], *, now: datetime) -> tuple[str, dict]:
    """The PostgreSQL upsert of `write` and its parameters, which ingest runs as a CTE of
    the customers' update (customers/ingest.py)."""
    return PG_UPSERT, {"tenant": tenant_id, "day": now.date(), "snapshots": _json(rows)}


def history(session: Session, user_id: str, *, days: int, now: datetime) -> list[ScoreSnapshot]:
    """The user's daily snapshots of the last `days` days, oldest first (a tenant session)."""
    since = now.date() - timedelta(days=days - 1)
    return list(session.scalars(select(ScoreSnapshot).where(ScoreSnapshot.user_id == user_id,
                                                            ScoreSnapshot.day >= since)
                                .order_by(ScoreSnapshot.day)))


def prune(session: Session, *, now: datetime) -> int:
    """Drop the tenant's snapshots older than RETENTION_DAYS (a tenant session)."""
    cutoff = now.date() - timedelta(days=RETENTION_DAYS)
    return session.execute(delete(ScoreSnapshot).where(ScoreSnapshot.day < cutoff)).rowcount or 0

