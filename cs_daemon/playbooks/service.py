"""Playbooks: create within the plan, update, status changes, archive, success rates and
the audience count of a condition tree."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from .. import plans
from ..customers.models import Customer
from ..db import room_for_segments
from ..engine import conditions
from ..errors import NotFound, PlanLimit, ValidationFailed
from ..interventions.models import Intervention
from ..tenants import service as tenants
from .models import Playbook

DECIDED = ("positive", "negative", "neutral")


def check_conditions(tree: dict | None, field: str) -> dict:
    tree = tree or {}
    try:
        conditions.validate(tree)
    except conditions.ConditionError as exc:
        where = field + exc.path[1:]
        raise ValidationFailed(f"invalid {field}: {where}: {exc.message}",
                               [{"field": where, "message": exc.message}]) from None
    return tree


def _apply(playbook: Playbook, fields: dict) -> None:
    for name in ("entry_conditions", "exit_conditions"):
        if name in fields:
            setattr(playbook, name, check_conditions(fields[name], name))
    for name in ("name", "lifecycle_area"):
        if name in fields and (fields[name] is not None or name == "lifecycle_area"):
            setattr(playbook, name, fields[name])
    for name in ("constraints", "strategy_hints"):
        if name in fields:
            setattr(playbook, name, fields[name] or {})


def create(session: Session, tenant_id: str, fields: dict, *, now: datetime, test: bool = False) -> Playbook:
    tenant = tenants.locked_for_limits(session, tenant_id)
    limit = plans.plan(tenant.plan_tier).playbooks
    current = count_live(session)
    if limit is not None and current >= limit:
        raise PlanLimit(f"the {tenant.plan_tier} plan allows {limit} playbooks", current=current,
                        limit=limit, upgrade_to=plans.plan(tenant.plan_tier).upgrade_to)
    playbook = Playbook(tenant_id=tenant_id, name=fields["name"], status="draft", test=test,
                        created_at=now, updated_at=now, status_changed_at=now)
    _apply(playbook, {"entry_conditions": {}, "exit_conditions": {}, "constraints": {},
                      "strategy_hints": {}, **fields})
    session.add(playbook)
    session.flush()
    return playbook


def count_live(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Playbook).where(Playbook.status != "archived")) or 0


def get(session: Session, playbook_id: str) -> Playbook:
    playbook = session.get(Playbook, playbook_id)
    if playbook is None:
        raise NotFound("playbook not found")
    return playbook


def find_by_name(session: Session, name: str) -> Playbook | None:
    return session.scalars(select(Playbook).where(Playbook.name == name)
                           .order_by(Playbook.created_at).limit(1)).first()


def update(session: Session, playbook_id: str, fields: dict, *, now: datetime) -> Playbook:
    playbook = get(session, playbook_id)
    _apply(playbook, fields)
    playbook.updated_at = now
    return playbook


def set_status(session: Session, playbook_id: str, status: str, *, now: datetime) -> Playbook:
    playbook = get(session, playbook_id)
    playbook.status = status
    playbook.status_changed_at = now
    playbook.updated_at = now
    return playbook


def list_all(session: Session) -> list[Playbook]:
    return list(session.scalars(select(Playbook).order_by(Playbook.created_at, Playbook.id)))


def active(session: Session) -> list[Playbook]:
    return list(session.scalars(select(Playbook).where(Playbook.status == "active")
                                .order_by(Playbook.created_at, Playbook.id)))


def success_rates(session: Session) -> dict[str, float | None]:
    """positive / decided outcomes of each playbook's interventions (test data excluded)."""
    rows = session.execute(
        select(Intervention.playbook_id,
               func.count().filter(Intervention.outcome == "positive"),
               func.count().filter(Intervention.outcome.in_(DECIDED)))
        .where(Intervention.playbook_id.isnot(None), Intervention.test.is_(False))
        .group_by(Intervention.playbook_id)
    ).all()
    return {pid: (round(pos / decided, 4) if decided else None) for pid, pos, decided in rows}


def preview_count(session: Session, tree: dict, *, now: datetime) -> int:
    tree = check_conditions(tree, "entry_conditions")
    expr = conditions.to_sql(tree, now=now, dialect=session.get_bind().dialect.name)
    room_for_segments(session)
    return session.scalar(select(func.count()).select_from(Customer).where(expr)) or 0
