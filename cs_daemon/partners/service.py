"""A partner's customer tenants: provisioning, reading, and their figures.

The partner's own session is scoped to the partner tenant, so nothing of a customer's
tenant-owned tables is visible in it. `customer_session` is the one way in: it checks
that the partner provisioned the tenant, then opens a session scoped to that customer
alone, on the partner's connection and transaction (one unit of work, one commit).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterator

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from .. import uow
from ..customers.models import Event
from ..db import new_id
from ..errors import NotFound
from ..interventions.models import Intervention
from ..tenants import service as tenants
from ..tenants.models import Tenant

STATS_WINDOW = timedelta(days=30)
DECIDED = ("positive", "negative", "neutral")


@contextmanager
def _scoped(session: Session, tenant_id: str) -> Iterator[Session]:
    scoped = Session(bind=session.connection(), expire_on_commit=False)
    uow.begin(scoped, tenant_id, uow.uow_of(session).settings, after_commit=uow.uow_of(session).after_commit)
    try:
        yield scoped
        scoped.flush()
    finally:
        scoped.close()   # leaves the shared transaction to the partner's session


def owned_customer(session: Session, partner_id: str, tenant_id: str) -> Tenant:
    """The customer tenant, if this partner provisioned it; otherwise 404 (like a missing id)."""
    tenant = session.get(Tenant, tenant_id)
    if tenant is None or tenant.partner_tenant_id != partner_id:
        raise NotFound("customer not found")
    return tenant


@contextmanager
def customer_session(session: Session, partner_id: str, tenant_id: str) -> Iterator[Session]:
    """A session scoped to one customer tenant of this partner (404 for any other tenant)."""
    owned_customer(session, partner_id, tenant_id)
    with _scoped(session, tenant_id) as scoped:
        yield scoped


def provision(session: Session, partner_id: str, *, name: str, owner_email: str, plan_tier: str,
              now: datetime) -> tenants.CreatedTenant:
    """A customer tenant linked to the partner, with its first admin and admin `full` key."""
    tenant_id = new_id()   # known up front, so the new tenant's rows are written in its own scope
    with _scoped(session, tenant_id) as scoped:
        return tenants.create(scoped, tenant_id=tenant_id, name=name, owner_email=owner_email, now=now,
                              plan_tier=plan_tier, partner_tenant_id=partner_id)


def list_customers(session: Session, partner_id: str) -> list[Tenant]:
    return list(session.scalars(select(Tenant).where(Tenant.partner_tenant_id == partner_id)
                                .order_by(Tenant.created_at, Tenant.id)))


@dataclass(frozen=True)
class Figures:
    tracked_users: int = 0
    events: int = 0
    interventions: int = 0
    delivered: int = 0
    positive: int = 0
    decided: int = 0

    def __add__(self, other: "Figures") -> "Figures":
        return Figures(*(a + b for a, b in zip(self.astuple(), other.astuple())))

    def astuple(self) -> tuple[int, ...]:
        return (self.tracked_users, self.events, self.interventions, self.delivered, self.positive, self.decided)

    def public(self) -> dict:
        rate = round(self.positive / self.decided, 4) if self.decided else 0.0
        return {"tracked_users": self.tracked_users, "events_30d": self.events,
                "interventions_30d": self.interventions, "delivered_30d": self.delivered,
                "positive_outcome_rate": rate}


def customer_figures(session: Session, partner_id: str, tenant_id: str, *, now: datetime) -> Figures:
    """The last 30 days of one customer, test-mode data excluded; interventions counted as
    in analytics (no shadow or held-out decisions, no escalations)."""
    tenant = owned_customer(session, partner_id, tenant_id)
    since = now - STATS_WINDOW
    with customer_session(session, partner_id, tenant_id) as scoped:
        events = scoped.scalar(select(func.count()).select_from(Event)
                               .where(Event.test.is_(False), Event.timestamp >= since)) or 0
        in_range = and_(Intervention.test.is_(False), Intervention.planned_at >= since,
                        Intervention.status.not_in(("shadow", "held_out")), Intervention.channel != "escalate")
        total, delivered, positive, decided = scoped.execute(select(
            func.count(), func.count().filter(Intervention.status == "delivered"),
            func.count().filter(Intervention.outcome == "positive"),
            func.count().filter(Intervention.outcome.in_(DECIDED))).where(in_range)).one()
    return Figures(tenant.tracked_users, events, total, delivered, positive, decided)


def overall_figures(session: Session, partner_id: str, *, now: datetime) -> tuple[int, Figures]:
    """(customers, their figures summed); the rate is over all their decided outcomes."""
    customers = list_customers(session, partner_id)
    total = Figures()
    for customer in customers:
        total = total + customer_figures(session, partner_id, customer.id, now=now)
    return len(customers), total
