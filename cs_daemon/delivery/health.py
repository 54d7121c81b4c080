"""What the engineer on call asks of deliveries (docs/operations.md): how many are due,
how many overdue (due longer than a threshold ago and still open: nothing attempted them,
or an attempt hangs), and how many failed for good lately, by channel (an intervention's
channel, else the delivery's kind) and endpoint. Read across tenants, counts only; tenants held by their kill switch
are left out (their deliveries wait on purpose)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from . import states
from .models import Delivery
from .service import OPEN, _held


@dataclass
class Backlog:
    channel: str
    endpoint: str
    due: int
    overdue: int
    failed_last_hour: int
    oldest_due_at: datetime | None


def _endpoint():
    return func.coalesce(Delivery.endpoint_id, Delivery.url)


def _channel():
    """An intervention's delivery by its channel (email, in_app, webhook, crm), any other
    by its kind (event: webhook fan-out, dispatch: external action, ...)."""
    return case((Delivery.kind == "channel", func.replace(Delivery.event_type, "channel.", "")), else_=Delivery.kind)


def due_by_channel(session: Session, now: datetime, overdue_after: timedelta) -> list[Backlog]:
    return _backlog(session, now, overdue_after, by_endpoint=False)


def by_endpoint(session: Session, now: datetime, overdue_after: timedelta) -> list[Backlog]:
    return _backlog(session, now, overdue_after, by_endpoint=True)


def _backlog(session: Session, now: datetime, overdue_after: timedelta, *, by_endpoint: bool) -> list[Backlog]:
    is_open = Delivery.status.in_(OPEN) & (Delivery.next_attempt_at <= now)
    overdue = Delivery.status.in_(OPEN) & (Delivery.next_attempt_at <= now - overdue_after)
    failed = (Delivery.status == states.FAILED) & (Delivery.updated_at >= now - timedelta(hours=1))
    keys = [_channel(), _endpoint()] if by_endpoint else [_channel()]
    rows = session.execute(
        select(*keys,
               func.count().filter(is_open), func.count().filter(overdue), func.count().filter(failed),
               func.min(case((is_open, Delivery.next_attempt_at))))
        .where(((Delivery.status.in_(OPEN)) & (Delivery.next_attempt_at <= now)) | failed,
               Delivery.tenant_id.notin_(_held()))
        .group_by(*keys)).all()
    out = []
    for row in rows:
        channel, endpoint = row[0], (row[1] if by_endpoint else "")
        counts = row[-4:]
        out.append(Backlog(channel, endpoint or "", counts[0], counts[1], counts[2], counts[3]))
    return sorted(out, key=lambda b: (-b.overdue, -b.due, b.channel, b.endpoint))
