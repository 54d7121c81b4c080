"""Interventions and escalations: manual creation, the review state machine
(docs/interventions.md) and escalation handling. Delivery itself is the pipeline's
(`interventions.pipeline`)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..customers import fields
from ..customers.models import Customer
from ..engine import messages
from ..errors import NotFound, ValidationFailed
from ..outbox import service as outbox
from ..playbooks.models import Playbook
from ..tenants import config as tenant_config
from ..tenants.models import Tenant
from . import outcomes, pipeline, states
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


INTERVENTION_STATUSES = ("planned", "approved", "sent", "delivered", "failed", "rejected", "rolled_back", "shadow",
                         "held_out")
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


def approve(session: Session, intervention_id: str, *, now: datetime) -> Intervention:
    iv = get(session, intervention_id)
    states.change(session, iv, "approve", "approved", allowed=states.FROM["approve"], approved_at=now, updated_at=now)
    pipeline.start(session, iv, now=now)
    return iv


def pause(session: Session, intervention_id: str, *, now: datetime) -> Intervention:
    iv = get(session, intervention_id)
    states.change(session, iv, "pause", "planned", allowed=states.FROM["pause"], refused_with=409,
                  approved_at=None, updated_at=now)
    pipeline.stop(session, iv, now=now)
    return iv


def _check_reason(reason: str | None, *, least: int) -> None:
    """A reason's length as the request bodies take it (RejectBody, RollbackBody, FlagBody),
    for the callers that build none (cs)."""
    if reason is not None and not least <= len(reason) <= 2000:
        words = "1 to 2000 characters" if least else "at most 2000 characters"
        raise ValidationFailed(f"the reason must be {words}", [{"field": "reason", "message": f"must be {words}"}])


def reject(session: Session, intervention_id: str, reason: str, *, now: datetime) -> Intervention:
    _check_reason(reason, least=0)
    iv = get(session, intervention_id)
    states.change(session, iv, "reject", "rejected", allowed=states.FROM["reject"], reason=reason, updated_at=now)
    return iv


def rollback(session: Session, intervention_id: str, reason: str | None, *, now: datetime) -> Intervention:
    _check_reason(reason, least=0)
    iv = get(session, intervention_id)
    was = states.change(session, iv, "roll back", "rolled_back", allowed=states.FROM["rollback"], reason=reason,
                        updated_at=now, attribution_until=None)
    pipeline.stop(session, iv, now=now)
    pipeline.withdraw(session, iv, was=was, now=now)
    return iv


def edit_message(session: Session, intervention_id: str, message_body: str, *, now: datetime) -> Intervention:
    """A person rewrites the message of a planned intervention before approving it; the
    quality checks run again on the new text, as for a drafted one (docs/api.md,
    "Editing a planned message"). Only while planned: later the message may be leaving."""
    iv = get(session, intervention_id)
    states.change(session, iv, "edit", "planned", allowed=states.FROM["edit"], message_body=message_body,
                  updated_at=now)
    hints = _hints_of(session, iv.playbook_id)
    brand = session.get(Tenant, iv.tenant_id).brand_context
    iv.quality_checks = messages.quality_checks(message_body, channel=iv.channel, brand=brand, hints=hints)
    return iv


def _hints_of(session: Session, playbook_id: str | None) -> dict:
    """The strategy hints of the playbook (none for a manual intervention's)."""
    playbook = session.get(Playbook, playbook_id) if playbook_id else None
    return playbook.strategy_hints if playbook is not None and isinstance(playbook.strategy_hints, dict) else {}


def flag(session: Session, intervention_id: str, reason: str, *, now: datetime) -> Intervention:
    _check_reason(reason, least=1)
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
    """An open or delegated escalation is handled, once (docs/api.md, "Other choices
    where the documents are silent")."""
    iv = get(session, escalation_id, escalation=True)
    states.change(session, iv, "handle", "handled", allowed=states.FROM["handle"], action_taken=action_taken,
                  handled_by=handled_by, updated_at=now)
    if outcome is not None:
        iv.outcome, iv.outcome_at = outcome, now
        if outcome in outcomes.DECIDED:
            outcomes.emit_recorded(session, iv, now=now)
    return iv


def _template_message(session: Session, tenant: Tenant, user_id: str, playbook_id: str | None,
                      channel: str) -> tuple[str, list[dict]]:
    """The playbook's template message for this user and channel (its default when the
    playbook has none), with its quality checks: what a delegated escalation says."""
    hints = _hints_of(session, playbook_id)
    customer = session.get(Customer, (tenant.id, user_id))
    user = {f: getattr(customer, f, None) for f in fields.ALL}
    message = messages.render_template(hints.get("message_template"), channel=channel, user=user, hints=hints,
                                       brand=tenant.brand_context)
    return message, messages.quality_checks(message, channel=channel, brand=tenant.brand_context, hints=hints)


def delegate(session: Session, tenant_id: str, escalation_id: str, *, channel: str, now: datetime) -> Intervention:
    """The escalation is delegated to a channel: a new intervention enters the pipeline,
    planned or approved as the approval mode says."""
    esc = get(session, escalation_id, escalation=True)
    states.change(session, esc, "delegate", "delegated", allowed=states.FROM["delegate"], updated_at=now)
    tenant = session.get(Tenant, tenant_id)
    mode = tenant_config.read(tenant.config).approval_mode
    message, checks = _template_message(session, tenant, esc.user_id, esc.playbook_id, channel)
    iv = Intervention(tenant_id=tenant_id, user_id=esc.user_id, playbook_id=esc.playbook_id, status="planned",
                      channel=channel, message_body=message, quality_checks=checks,
                      reasoning=f"delegated escalation {esc.id}: {esc.reason or ''}".strip(),
                      source="delegated", test=esc.test, planned_at=now, updated_at=now)
    session.add(iv)
    session.flush()
    if mode == "full_auto" and not tenant.shadow_mode and messages.passed_all(checks):
        approve(session, iv.id, now=now)   # a message that failed a check waits for a person, as the engine's does
    return esc
