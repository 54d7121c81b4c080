"""Interventions and escalations: manual creation, the review state machine
(decisions §8) and escalation handling. Delivery itself is the pipeline's
(`interventions.pipeline`)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..customers.models import Customer
from ..errors import InvalidState, NotFound, ValidationFailed
from ..outbox import service as outbox
from ..playbooks.models import Playbook
from ..tenants import config as tenant_config
from ..tenants.models import Tenant
from . import outcomes, pipeline
from .models import Intervention

ESCALATE = "escalate"


def _require_user_and_playbook(session: Session, tenant_id: str, user_id: str, playbook_id: str) -> None:
    if session.get(Customer, (tenant_id, user_id)) is None:
        raise NotFound("user not found")
    if session.get(Playbook, playbook_id) is None:
        raise NotFound("playbook not found")


def get(session: Session, intervention_id: str, *, escalation: bool = False) -> Intervention:
    iv = session.get(Intervention, intervention_id)
    if iv is None or (iv.channel == ESCALATE) != escalation:
        raise NotFound("escalation not found" if escalation else "intervention not found")
    return iv


INTERVENTION_STATUSES = ("planned", "approved", "sent", "delivered", "failed", "rejected", "rolled_back", "shadow")
ESCALATION_STATUSES = ("open", "handled", "delegated")


def list_recent(session: Session, *, limit: int, escalations: bool = False,
                status: str | None = None) -> list[Intervention]:
    query = select(Intervention).order_by(Intervention.planned_at.desc(), Intervention.id.desc()).limit(limit)
    query = query.where(Intervention.channel == ESCALATE) if escalations else query.where(
        Intervention.channel != ESCALATE)
    if status is not None:
        allowed = ESCALATION_STATUSES if escalations else INTERVENTION_STATUSES
        if status not in allowed:
            raise ValidationFailed(f"unknown status {status!r}: one of {', '.join(allowed)}",
                                   [{"field": "status", "message": f"must be one of {', '.join(allowed)}"}])
        query = query.where(Intervention.status == status)
    return list(session.scalars(query))


def create(session: Session, tenant_id: str, *, user_id: str, playbook_id: str, channel: str,
           message_body: str | None, now: datetime, test: bool) -> Intervention:
    _require_user_and_playbook(session, tenant_id, user_id, playbook_id)
    iv = Intervention(tenant_id=tenant_id, user_id=user_id, playbook_id=playbook_id, status="planned",
                      channel=channel, message_body=message_body, source="manual", test=test,
                      planned_at=now, updated_at=now)
    session.add(iv)
    session.flush()
    return iv


def _wrong(iv: Intervention, action: str, allowed: tuple[str, ...], status: int = 404) -> InvalidState:
    exc = InvalidState(f"cannot {action} an intervention that is {iv.status} (only {', '.join(allowed)})")
    exc.status = status
    return exc


def approve(session: Session, intervention_id: str, *, now: datetime) -> Intervention:
    iv = get(session, intervention_id)
    if iv.status != "planned":
        raise _wrong(iv, "approve", ("planned",))
    iv.status, iv.approved_at, iv.updated_at = "approved", now, now
    pipeline.start(session, iv, now=now)
    return iv


def pause(session: Session, intervention_id: str, *, now: datetime) -> Intervention:
    iv = get(session, intervention_id)
    if iv.status not in ("planned", "approved"):
        raise _wrong(iv, "pause", ("planned", "approved"), status=409)
    pipeline.stop(session, iv, now=now)
    iv.status, iv.approved_at, iv.updated_at = "planned", None, now
    return iv


def reject(session: Session, intervention_id: str, reason: str, *, now: datetime) -> Intervention:
    iv = get(session, intervention_id)
    if iv.status != "planned":
        raise _wrong(iv, "reject", ("planned",))
    iv.status, iv.reason, iv.updated_at = "rejected", reason, now
    return iv


def rollback(session: Session, intervention_id: str, reason: str | None, *, now: datetime) -> Intervention:
    iv = get(session, intervention_id)
    if iv.status not in ("approved", "sent", "delivered"):
        raise _wrong(iv, "roll back", ("approved", "sent", "delivered"))
    was = iv.status
    pipeline.stop(session, iv, now=now)
    iv.status, iv.reason, iv.updated_at, iv.attribution_until = "rolled_back", reason, now, None
    if was in ("sent", "delivered"):
        pipeline.withdraw(session, iv, now=now)
    return iv


def flag(session: Session, intervention_id: str, reason: str, *, now: datetime) -> Intervention:
    iv = session.get(Intervention, intervention_id)
    if iv is None:
        raise NotFound("intervention not found")
    iv.flagged, iv.flag_reason, iv.updated_at = True, reason, now
    return iv


# -- escalations ----------------------------------------------------------------------------

def escalate(session: Session, tenant_id: str, *, user_id: str, playbook_id: str, severity: str, reason: str,
             now: datetime, test: bool) -> Intervention:
    _require_user_and_playbook(session, tenant_id, user_id, playbook_id)
    iv = Intervention(tenant_id=tenant_id, user_id=user_id, playbook_id=playbook_id, status="open",
                      channel=ESCALATE, severity=severity, reason=reason, reasoning=reason, source="manual",
                      test=test, planned_at=now, updated_at=now)
    session.add(iv)
    session.flush()
    outbox.record(session, tenant_id, "intervention.escalated", {
        "intervention_id": iv.id, "user_id": user_id, "playbook_id": playbook_id, "reason": reason,
        "escalated_at": now.isoformat()}, now=now, test=test)
    return iv


def handle(session: Session, escalation_id: str, *, action_taken: str, outcome: str | None, handled_by: str,
           now: datetime) -> Intervention:
    iv = get(session, escalation_id, escalation=True)
    iv.status, iv.action_taken, iv.handled_by, iv.updated_at = "handled", action_taken, handled_by, now
    if outcome is not None:
        iv.outcome, iv.outcome_at = outcome, now
        if outcome in outcomes.DECIDED:
            outcomes.emit_recorded(session, iv, now=now)
    return iv


def delegate(session: Session, tenant_id: str, escalation_id: str, *, channel: str, now: datetime) -> Intervention:
    """The escalation is delegated to a channel: a new intervention enters the pipeline,
    planned or approved as the approval mode says."""
    esc = get(session, escalation_id, escalation=True)
    esc.status, esc.updated_at = "delegated", now
    tenant = session.get(Tenant, tenant_id)
    mode = tenant_config.read(tenant.config).approval_mode
    iv = Intervention(tenant_id=tenant_id, user_id=esc.user_id, playbook_id=esc.playbook_id, status="planned",
                      channel=channel, message_body=esc.suggested_action, reasoning=f"delegated escalation {esc.id}: {esc.reason or ''}".strip(),
                      source="delegated", test=esc.test, planned_at=now, updated_at=now)
    session.add(iv)
    session.flush()
    if mode == "full_auto" and not tenant.shadow_mode:
        approve(session, iv.id, now=now)
    return esc
