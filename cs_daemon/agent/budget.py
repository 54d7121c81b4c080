"""The daily token budget of a tenant's agent: tokens used per tenant and UTC day, added
atomically (an upsert), each model call's in its own short transaction so it counts
even when the decision it served is never recorded (a dry run, no action, a failure)."""

from __future__ import annotations

from datetime import date

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from ..db import session_scope
from ..uow import uow_of
from .models import AgentTokenUse

_table = AgentTokenUse.__table__


def used(session: Session, tenant_id: str, day: date) -> int:
    return session.scalar(select(_table.c.tokens).where(_table.c.tenant_id == tenant_id, _table.c.day == day)) or 0


def add(session: Session, tenant_id: str, day: date, tokens: int) -> None:
    """Add `tokens` to the day's count (concurrent decisions add up, none is lost)."""
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(_table).values(tenant_id=tenant_id, day=day, tokens=tokens)
    stmt = stmt.on_conflict_do_update(index_elements=["tenant_id", "day"],
                                      set_={"tokens": _table.c.tokens + stmt.excluded.tokens})
    session.execute(stmt)


def charger(session: Session, tenant_id: str, day: date):
    """A function that adds tokens durably, in a unit of work of its own, next to the
    caller's read-only one (same database settings)."""
    settings = uow_of(session).settings

    def charge(tokens: int) -> None:
        if tokens <= 0 or settings is None:
            return
        with session_scope(settings, tenant_id=tenant_id) as own:
            add(own, tenant_id, day, tokens)

    return charge
