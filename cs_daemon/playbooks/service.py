"""Playbooks: create within the plan, update, status changes, archive, success rates and
the audience count of a condition tree. Every write checks the conditions, constraints
and hints; a stored playbook that no longer validates is left out by the engine
(`active`, `usable`) and listed by `cs doctor` (`problems`)."""

from __future__ import annotations

import logging
from datetime import datetime

from pydantic import BaseModel, ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from .. import plans
from ..customers.models import Customer
from ..db import locked, room_for_segments
from ..engine import conditions
from ..errors import PlanLimit, ValidationFailed, present
from ..interventions.models import Intervention
from ..tenants import service as tenants
from ..schemas import error_details
from .models import Playbook
from .schemas import Constraints, StrategyHints

log = logging.getLogger(__name__)
DECIDED = ("positive", "negative", "neutral")
SETTINGS_MODELS: dict[str, type[BaseModel]] = {"constraints": Constraints, "strategy_hints": StrategyHints}


def check_conditions(tree: dict | None, field: str) -> dict:
    tree = tree or {}
    try:
        conditions.validate(tree)
    except conditions.ConditionError as exc:
        where = field + exc.path[1:]
        raise ValidationFailed(f"invalid {field}: {where}: {exc.message}",
                               [{"field": where, "message": exc.message}]) from None
    return tree


def check_settings(value: dict | None, field: str) -> dict:
    """`constraints` or `strategy_hints` as stored: typed by their model (unknown keys
    dropped); ValidationFailed naming the field (`constraints.cooldown_hours`)."""
    if value is not None and not isinstance(value, dict):
        raise ValidationFailed(f"invalid {field}: must be an object", [{"field": field, "message": "must be an object"}])
    try:
        return SETTINGS_MODELS[field].model_validate(value or {}).model_dump(exclude_unset=True)
    except ValidationError as exc:
        details = error_details(exc, field)
        raise ValidationFailed(f"invalid {field}: {details[0]['field']}: {details[0]['message']}", details) from None


def _apply(playbook: Playbook, fields: dict) -> None:
    for name in ("entry_conditions", "exit_conditions"):
        if name in fields:
            setattr(playbook, name, check_conditions(fields[name], name))
    for name in ("name", "lifecycle_area"):
        if name in fields and (fields[name] is not None or name == "lifecycle_area"):
            setattr(playbook, name, fields[name])
    for name in SETTINGS_MODELS:
        if name in fields:
            setattr(playbook, name, check_settings(fields[name], name))


def problems(playbook: Playbook) -> list[dict]:
    """What of a stored playbook does not validate now: [{field, message}] (empty when
    it is fine). Conditions name the first bad node of each tree."""
    found = []
    for name in ("entry_conditions", "exit_conditions"):
        try:
            check_conditions(getattr(playbook, name), name)
        except ValidationFailed as exc:
            found += exc.extra["details"]
    for name in SETTINGS_MODELS:
        try:
            check_settings(getattr(playbook, name), name)
        except ValidationFailed as exc:
            found += exc.extra["details"]
    return found


_verdicts: dict[tuple[str, int], tuple[str, ...]] = {}


def _bad_fields(playbook: Playbook) -> tuple[str, ...]:
    """The fields of `problems`, remembered per (id, revision): every update through the
    ORM moves the revision."""
    key = (playbook.id, playbook.revision)
    fields = _verdicts.get(key)
    if fields is None:
        found = problems(playbook)
        if found:
            log.warning("playbook %s of tenant %s is skipped: %s: %s (see cs doctor)", playbook.id,
                        playbook.tenant_id, found[0]["field"], found[0]["message"])
        if len(_verdicts) >= 4096:
            _verdicts.clear()
        fields = _verdicts[key] = tuple(d["field"] for d in found)
    return fields


def usable(playbook: Playbook) -> bool:
    """Whether the engine may act on this playbook: it validates as a write would."""
    return not _bad_fields(playbook)


def exit_usable(playbook: Playbook) -> bool:
    """Whether the playbook's exit conditions validate (outcomes need only those)."""
    return not any(f.startswith("exit_conditions") for f in _bad_fields(playbook))


def create(session: Session, tenant_id: str, fields: dict, *, now: datetime, test: bool = False) -> Playbook:
    _room_for_one_more(session, tenant_id)
    playbook = Playbook(tenant_id=tenant_id, name=fields["name"], status="draft", test=test,
                        created_at=now, updated_at=now, status_changed_at=now)
    _apply(playbook, {"entry_conditions": {}, "exit_conditions": {}, "constraints": {},
                      "strategy_hints": {}, **fields})
    session.add(playbook)
    session.flush()
    return playbook


def _room_for_one_more(session: Session, tenant_id: str) -> None:
    """PlanLimit unless the plan allows one more playbook that is not archived (counted
    under the tenant's lock, so racing requests at the limit never pass it together)."""
    tenant = tenants.locked_for_limits(session, tenant_id)
    limit = plans.plan(tenant.plan_tier).playbooks
    current = count_live(session)
    if limit is not None and current >= limit:
        raise PlanLimit(f"the {tenant.plan_tier} plan allows {limit} playbooks", current=current,
                        limit=limit, upgrade_to=plans.plan(tenant.plan_tier).upgrade_to)


def count_live(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Playbook).where(Playbook.status != "archived")) or 0


def get(session: Session, playbook_id: str) -> Playbook:
    return present(session.get(Playbook, playbook_id), "playbook")


def find_by_name(session: Session, name: str) -> Playbook | None:
    return session.scalars(select(Playbook).where(Playbook.name == name)
                           .order_by(Playbook.created_at).limit(1)).first()


def _for_change(session: Session, playbook_id: str) -> Playbook:
    """The playbook read as committed, its row locked until commit: concurrent changes
    take turns (the revision each UPDATE checks then always matches, where two requests
    reading it unlocked made one of them a 409 no document lists)."""
    return present(locked(session, Playbook, playbook_id), "playbook")


def update(session: Session, playbook_id: str, fields: dict, *, now: datetime) -> Playbook:
    playbook = _for_change(session, playbook_id)
    _apply(playbook, fields)
    playbook.updated_at = now
    return playbook


def set_status(session: Session, playbook_id: str, status: str, *, now: datetime) -> Playbook:
    """Any status may follow any other; taking a playbook out of the archive counts it
    against the plan again (docs/playbooks.md)."""
    playbook = _for_change(session, playbook_id)
    if playbook.status == "archived" and status != "archived":
        tenants.locked_for_limits(session, playbook.tenant_id)
        session.refresh(playbook)          # read again under the lock: a racing request may have done it
        if playbook.status == "archived":
            _room_for_one_more(session, playbook.tenant_id)
    playbook.status = status
    playbook.status_changed_at = now
    playbook.updated_at = now
    return playbook


def list_all(session: Session) -> list[Playbook]:
    return list(session.scalars(select(Playbook).order_by(Playbook.created_at, Playbook.id)))


def active(session: Session) -> list[Playbook]:
    """The active playbooks the engine acts on: those that validate (`usable`)."""
    return [p for p in active_stored(session) if usable(p)]


def active_stored(session: Session) -> list[Playbook]:
    return list(session.scalars(select(Playbook).where(Playbook.status == "active")
                                .order_by(Playbook.created_at, Playbook.id)))


def skipped(playbooks: list[Playbook]) -> list[Playbook]:
    return [p for p in playbooks if not usable(p)]


def describe_skipped(playbooks: list[Playbook]) -> str:
    """One line naming the playbooks left out and their first problem (ids and field
    paths only: it is shown on the health check)."""
    parts = []
    for p in playbooks:
        found = problems(p)
        parts.append(f"playbook {p.id}: {found[0]['field']}" if found else f"playbook {p.id}")
    return "stored data that no longer validates: " + "; ".join(parts) + " (see cs doctor)"


def success_rates(session: Session) -> dict[str, float | None]:
    """positive / decided outcomes of each playbook's interventions (test data and held-out
    decisions excluded: the rate is of what the playbook did)."""
    rows = session.execute(
        select(Intervention.playbook_id,
               func.count().filter(Intervention.outcome == "positive"),
               func.count().filter(Intervention.outcome.in_(DECIDED)))
        .where(Intervention.playbook_id.isnot(None), Intervention.test.is_(False),
               Intervention.status != "held_out")
        .group_by(Intervention.playbook_id)
    ).all()
    return {pid: (round(pos / decided, 4) if decided else None) for pid, pos, decided in rows}


def preview_count(session: Session, tree: dict, *, now: datetime) -> int:
    tree = check_conditions(tree, "entry_conditions")
    expr = conditions.to_sql(tree, now=now, dialect=session.get_bind().dialect.name)
    room_for_segments(session)
    return session.scalar(select(func.count()).select_from(Customer).where(expr)) or 0
