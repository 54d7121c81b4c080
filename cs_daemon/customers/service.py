"""Customers: create, read, list with a cursor, statistics, and the decay sweep."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.orm import Session

from .. import jsontext, plans
from ..engine import scoring
from ..errors import PlanLimit, ValidationFailed, present
from ..outbox import service as outbox
from ..tenants import config as tenant_config
from ..tenants.models import Tenant
from ..uow import uow_of
from .ingest import reserve_customers
from . import snapshots
from .models import Customer, Event
from .state import merge_traits, rescore

ACTIVE_DAYS = 30


def get(session: Session, user_id: str) -> Customer:
    return present(session.get(Customer, (_tenant(session), user_id)), "customer")


def _tenant(session: Session) -> str:
    tenant_id = uow_of(session).tenant_id
    if tenant_id is None:
        raise RuntimeError("customers are read in a tenant session")
    return tenant_id


def create(session: Session, tenant_id: str, *, user_id: str, email: str | None, name: str | None,
           properties: dict | None, test: bool, now: datetime) -> tuple[Customer, bool]:
    """The customer, and whether it was created (an existing one is returned unchanged)."""
    existing = session.get(Customer, (tenant_id, user_id))
    if existing is not None:
        return existing, False
    blocked, created = reserve_customers(session, tenant_id, [user_id], test=test, now=now)
    if blocked:
        tenant = session.get(Tenant, tenant_id)
        raise PlanLimit(
            f"tracked user limit of {tenant.tracked_user_limit} reached on plan {tenant.plan_tier}",
            current=tenant.tracked_users, limit=tenant.tracked_user_limit,
            upgrade_to=plans.plan(tenant.plan_tier).upgrade_to,
        )
    customer = session.get(Customer, (tenant_id, user_id))
    if not created:   # a racing request created it meanwhile: it is theirs (201), this one is a 200
        return customer, False
    traits = dict(properties or {})
    if email is not None:
        traits["email"] = email
    if name is not None:
        traits["name"] = name
    merge_traits(customer, traits)
    state = scoring.UserState(first_seen_at=customer.created_at)
    config = tenant_config.scoring_of(session.scalar(select(Tenant.config).where(Tenant.id == tenant_id)))
    rescore(customer, state, config, now)
    return customer, True


@dataclass(frozen=True)
class Page:
    customers: list[Customer]
    next_cursor: str | None


def list_page(session: Session, *, limit: int, cursor: str | None) -> Page:
    """Newest first, by (created_at, id); the cursor is opaque to clients."""
    return page_of(session, newest_first(limit), limit=limit, cursor=cursor)


def newest_first(limit: int) -> Select:
    """Customers newest first, by (created_at, id): one more than a page, to tell whether another follows."""
    return select(Customer).order_by(Customer.created_at.desc(), Customer.id.desc()).limit(limit + 1)


def page_of(session: Session, query: Select, *, limit: int, cursor: str | None) -> Page:
    """The page of a `newest_first` query (with any filters) that follows `cursor`."""
    if cursor:
        created_at, user_id = _decode(cursor)
        query = query.where(or_(Customer.created_at < created_at,
                                and_(Customer.created_at == created_at, Customer.id < user_id)))
    rows = list(session.scalars(query))
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, _encode(rows[-1]) if more and rows else None)


def _encode(c: Customer) -> str:
    raw = json.dumps([c.created_at.isoformat(), c.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str) -> tuple[datetime, str]:
    """The (created_at, id) a cursor of _encode holds; 400 for anything else, including a
    time without a zone or out of range, which the query could not compare."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, user_id = jsontext.loads(raw)
        if not isinstance(created, str) or not isinstance(user_id, str):
            raise TypeError("a cursor holds two strings")
        at = datetime.fromisoformat(created)
        if at.tzinfo is None:
            raise _bad_cursor("holds a time without a time zone; pass next_cursor as it was given")
        return at.astimezone(timezone.utc), user_id
    except (ValueError, TypeError, OverflowError):
        raise _bad_cursor("not a cursor from next_cursor") from None


def _bad_cursor(message: str) -> ValidationFailed:
    return ValidationFailed(f"invalid cursor: {message}", [{"field": "cursor", "message": message}])


def stats(session: Session, *, now: datetime) -> dict[str, int]:
    since = now - timedelta(days=ACTIVE_DAYS)
    row = session.execute(select(
        func.count(),
        func.count().filter(Customer.last_activity_at >= since),
        func.count().filter(Customer.risk_level.in_(("high", "critical"))),
        func.count().filter(Customer.lifecycle_stage == "churned"),
    ).select_from(Customer)).one()
    return {"total": row[0], "active": row[1], "at_risk": row[2], "churned": row[3]}


def recent_events(session: Session, user_id: str, limit: int = 100) -> list[Event]:
    return list(session.scalars(
        select(Event).where(Event.user_id == user_id)
        .order_by(Event.timestamp.desc(), Event.received_at.desc()).limit(limit)
    ))


def milestone_progress(customer: Customer, config: dict | None) -> dict:
    """Progress through the tenant's milestones (`config` as stored: read typed here)."""
    milestones = list(dict.fromkeys(scoring.setting(tenant_config.scoring_of(config), "milestones")))
    done = set((customer.state or {}).get("milestones_done", []))
    items = [{"name": m, "done": m in done} for m in milestones]
    count = sum(1 for i in items if i["done"])
    return {"milestones": items, "done": count, "total": len(items),
            "percent": customer.activation_score}


def segment_memberships(customer: Customer, *, now: datetime) -> list[dict]:
    """Built-in segments; playbook audiences join them when playbooks exist."""
    segments = [{"segment": f"stage:{customer.lifecycle_stage}", "kind": "lifecycle"},
                {"segment": f"risk:{customer.risk_level}", "kind": "risk"}]
    if customer.last_activity_at and customer.last_activity_at >= now - timedelta(days=ACTIVE_DAYS):
        segments.append({"segment": "active_30d", "kind": "activity"})
    return segments


SWEEP_BATCH = 500
SWEEP_STALE = timedelta(minutes=10)


def _stale(now: datetime):
    return (or_(Customer.scored_at.is_(None), Customer.scored_at < now - SWEEP_STALE),
            Customer.lifecycle_stage != "churned")


def tenants_to_sweep(session: Session, *, now: datetime) -> list[str]:
    """Tenants with users the score sweep would re-score (an unscoped session)."""
    return list(session.scalars(select(Tenant.id).where(
        select(Customer.id).where(Customer.tenant_id == Tenant.id, *_stale(now)).exists())
        .order_by(Tenant.created_at, Tenant.id)))


def sweep(session: Session, *, now: datetime, batch: int = SWEEP_BATCH) -> int:
    """Re-score users not scored for a while so time decay shows (dormant, churned,
    fading engagement): the tenant's in a tenant-scoped session (as the periodic job
    runs it, one tenant at a time), every tenant's otherwise. Returns how many were
    re-scored. Users already churned by inactivity stay so until they act again, and
    are skipped."""
    configs: dict[str, scoring.Rules] = {}
    done = 0
    while True:
        rows = session.scalars(select(Customer).where(*_stale(now)).order_by(Customer.scored_at).limit(batch)).all()
        if not rows:
            snapshots.prune(session, now=now)
            return done
        store_ended_days(session, rows, now=now)
        changes: dict[str, list] = {}
        for customer in rows:
            if customer.tenant_id not in configs:
                configs[customer.tenant_id] = scoring.Rules.of(tenant_config.scoring_of(session.scalar(
                    select(Tenant.config).where(Tenant.id == customer.tenant_id))))
            state = scoring.UserState.from_json(customer.state)
            if state.first_seen_at is None:
                state.first_seen_at = customer.created_at
            found = rescore(customer, state, configs[customer.tenant_id], now)
            changes.setdefault(customer.tenant_id, []).extend(found)
        for tenant_id, events in changes.items():
            outbox.record_many(session, tenant_id, events, now=now)
        session.flush()
        done += len(rows)
        if len(rows) < batch:
            snapshots.prune(session, now=now)
            return done


def store_ended_days(session: Session, customers: list[Customer], *, now: datetime) -> None:
    """The score snapshots of the users whose last scored day is over, read from their
    rows before the re-score changes them (customers/snapshots.py)."""
    by_tenant: dict[str, list[Customer]] = {}
    for customer in customers:
        by_tenant.setdefault(customer.tenant_id, []).append(customer)
    for tenant_id, users in by_tenant.items():
        snapshots.write(session, tenant_id, snapshots.ended(users, now=now))
