"""Turning a decision into an intervention: the message (AI writer or template), the
status the approval mode allows (or `shadow`), and the events it emits."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from .. import metrics
from ..customers import fields
from ..customers.models import Customer
from ..engine import messages
from ..engine.contact_policy import ContactPolicy
from ..engine.decisions import Decision, PlaybookSpec, decide
from ..errors import ServiceError
from ..external import service as external
from ..interventions import outcomes, pipeline
from ..interventions.models import Intervention
from ..learning import service as learning
from ..outbox import service as outbox
from ..playbooks.models import Playbook
from ..tenants import config as tenant_config
from ..tenants.models import Tenant
from . import context, holdout

log = logging.getLogger(__name__)
USER_FIELDS = fields.ALL


@dataclass
class Proposal:
    """A decision with its written message, ready to be recorded."""

    decision: Decision
    spec: PlaybookSpec
    message: str | None
    reasoning: str
    checks: list[dict] | None
    live_only: bool = True      # decided on the live history alone (no test data behind it)
    held_out: bool = False      # the user is in the holdout: paced by their held-out decisions too
    learner_features: dict | None = None
    policy: ContactPolicy | None = None     # the contact policy it was decided under, checked again on recording


def propose(session: Session, tenant: Tenant, customer: Customer, *, now: datetime, writer,
            events=(), state_changed: bool = False, test_events: bool = False) -> Proposal | None:
    """Decide (read-only) and write the message; None when the engine does nothing. A
    live decision counts only live interventions against the repeat limits."""
    if tenant.kill_switch_active:
        return None
    specs = context.specs(session)
    if not specs:
        return None
    live_only = not (test_events or customer.test)
    user = context.user_context(session, customer, specs, now)
    held_out = holdout.is_held_out(tenant, customer.id)
    config = tenant_config.read(tenant.config)
    learner = context.learner(session, customer, specs, config.decision_features or [])
    policy = context.policy_of(config)
    history = context.history(session, customer.id, now, live_only=live_only, held_out=held_out, policy=policy)
    made = decide(user, specs, history, now=now, events=events, state_changed=state_changed, learner=learner)
    if made.action == "none":
        return None
    spec = next(s for s in specs if s.id == made.playbook_id)
    if made.action != "send":
        return Proposal(made, spec, None, made.reasoning or "", None, live_only, held_out, learner.features, policy)
    facts = {f: getattr(customer, f) for f in USER_FIELDS}
    brand = tenant.brand_context
    template = messages.render_template(spec.strategy_hints.get("message_template"), channel=made.channel,
                                        user=facts, hints=spec.strategy_hints, brand=brand)
    draft = writer.write(channel=made.channel, user=facts,
                         playbook={"name": spec.name, "goal": spec.strategy_hints.get("goal"),
                                   "hints": spec.strategy_hints},
                         brand=brand, decision_reasoning=made.reasoning or "", template_message=template)
    return Proposal(made, spec, draft.message, draft.reasoning, draft.checks, live_only, held_out, learner.features,
                    policy)


def initial_status(tenant: Tenant, proposal: Proposal) -> str:
    """docs/decisions.md, "What is recorded": shadow mode records only; suggest_only waits for a person; semi_auto
    approves confident picks; full_auto approves. A playbook that requires approval, or a
    message that failed a quality check, always waits for a person."""
    if tenant.shadow_mode:
        return "shadow"
    if proposal.decision.action == "escalate":
        return "open"
    config = tenant_config.read(tenant.config)
    if proposal.spec.constraints.get("require_approval"):
        return "planned"
    if proposal.checks is not None and not messages.passed_all(proposal.checks):
        return "planned"
    mode, threshold = config.approval_mode, config.auto_approve_threshold
    if mode == "full_auto" or (mode == "semi_auto" and (proposal.decision.confidence or 0) >= threshold):
        return "approved"
    return "planned"


def _dispatch(session: Session, tenant: Tenant, customer: Customer, proposal: Proposal, now: datetime,
              test: bool) -> str | None:
    """An external action picked by the engine is dispatched unless the tenant is in shadow
    mode; a missing or invalid action type leaves only the recommendation (logged)."""
    if tenant.shadow_mode:
        return None
    try:
        with session.begin_nested():
            action = external.dispatch(
                session, tenant.id, type_name=proposal.decision.action_type, user_id=customer.id,
                parameters=proposal.spec.strategy_hints.get("action_parameters") or {},
                reasoning=proposal.reasoning, confidence=proposal.decision.confidence, now=now, test=test)
    except ServiceError as exc:
        log.warning("external action %s not dispatched: %s", proposal.decision.action_type, exc.message)
        return None
    return action.id


def is_test(session: Session, customer: Customer, spec: PlaybookSpec, *, test_events: bool) -> bool:
    """A decision is test data when events tracked with a test key caused it, or it is
    for a test user, or by a test playbook: it then goes to the test-mode sink, never to
    a live channel (docs/api.md, "Test mode")."""
    if test_events or customer.test:
        return True
    playbook = session.get(Playbook, spec.id)
    return playbook is not None and playbook.test


def _log_learned(session: Session, tenant: Tenant, customer: Customer, proposal: Proposal, test: bool,
                 now: datetime, **keys) -> None:
    """The learner's choices behind this decision, in the decision log, keyed to what it made."""
    for learned in proposal.decision.learned:
        learning.log(session, tenant.id, kind=learned.kind, scope=learned.scope, user_id=customer.id,
                     features=proposal.learner_features, choice=learned.choice, test=test, now=now, **keys)


def _hold_out(session: Session, intervention: Intervention, now: datetime) -> Intervention:
    """A held-out user's decision: kept, never delivered, and no webhook event (a receiver
    acting on decision.recommended would contact the user and spoil the comparison). Its
    attribution window opens now, as a delivery's would (docs/decisions.md, "Holdout and
    uplift")."""
    outcomes.open_window(session, intervention, now)
    return intervention


def record(session: Session, tenant: Tenant, customer: Customer, proposal: Proposal, *,
           now: datetime, test: bool = False) -> Intervention | None:
    """Write the intervention (or, for an external action, its dispatch) and emit
    decision.recommended (and intervention.escalated). `test`: events tracked with a
    test key caused the decision."""
    made, spec = proposal.decision, proposal.spec
    decided_by = "learner" if any(len(learned.choice.estimates) > 1 for learned in made.learned) else "rules"
    metrics.bump(metrics.DECISIONS, decided_by=decided_by, action=made.action)
    test = is_test(session, customer, spec, test_events=test)
    intervention = None
    if made.action in ("send", "escalate"):
        status = initial_status(tenant, proposal)
        if status != "shadow" and made.action == "send" and holdout.is_held_out(tenant, customer.id):
            status = "held_out"
        intervention = Intervention(
            tenant_id=tenant.id, user_id=customer.id, playbook_id=spec.id, status=status,
            channel=made.channel, message_body=proposal.message, reasoning=proposal.reasoning,
            confidence=made.confidence, source="engine", quality_checks=proposal.checks,
            severity=made.severity, suggested_action=spec.strategy_hints.get("goal") if made.action == "escalate" else None,
            reason=made.reasoning if made.action == "escalate" else None, test=test,
            planned_at=now, approved_at=now if status == "approved" else None, updated_at=now)
        session.add(intervention)
        session.flush()
        if status == "held_out":   # logged like any decision; its outcome trains nothing (docs/decisions.md)
            _log_learned(session, tenant, customer, proposal, test, now, intervention_id=intervention.id)
            return _hold_out(session, intervention, now)
        if status == "approved":
            pipeline.start(session, intervention, now=now)
    action_id = _dispatch(session, tenant, customer, proposal, now, test) if made.action == "external_action" else None
    _log_learned(session, tenant, customer, proposal, test, now,
                 intervention_id=intervention.id if intervention else None, external_action_id=action_id)
    events = [("decision.recommended", {
        "user_id": customer.id, "playbook_id": spec.id, "action": made.action, "channel": made.channel,
        "action_type": made.action_type, "action_id": action_id, "confidence": made.confidence,
        "reasoning": proposal.reasoning, "intervention_id": intervention.id if intervention else None,
        "status": intervention.status if intervention else None, "decided_at": now.isoformat()})]
    if made.action == "escalate" and intervention.status != "shadow":
        events.append(("intervention.escalated", {
            "intervention_id": intervention.id, "user_id": customer.id, "playbook_id": spec.id,
            "reason": made.reasoning, "escalated_at": now.isoformat()}))
    outbox.record_many(session, tenant.id, events, now=now, test=test)
    return intervention
