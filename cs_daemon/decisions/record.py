"""Turning a decision into an intervention: the message (AI writer or template), the
status the approval mode allows (or `shadow`), and the events it emits."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from .. import metrics
from ..agent import service as agent_service
from ..agent.run import AgentRun
from ..customers import fields
from ..customers.models import Customer
from ..db import new_id
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
from . import context, holdout, trace

log = logging.getLogger(__name__)
USER_FIELDS = fields.ALL


@dataclass
class Proposal:
    """A decision with its written message, ready to be recorded; one that ends in no
    action (`decision.action == "none"`, no spec) is kept only as its trace (and, with the
    agent, its steps are still emitted)."""

    decision: Decision
    spec: PlaybookSpec | None
    message: str | None
    reasoning: str
    checks: list[dict] | None
    live_only: bool = True      # decided on the live history alone (no test data behind it)
    held_out: bool = False      # the user is in the holdout: paced by their held-out decisions too
    learner_features: dict | None = None
    decision_id: str = field(default_factory=new_id)   # its trace's id (docs/decisions.md, "The decision trace")
    agent: AgentRun | None = None   # the agent's run, when it ran (docs/ai.md, "The agent")
    policy: ContactPolicy | None = None     # the contact policy it was decided under, checked again on recording

    @property
    def acts(self) -> bool:
        return self.decision.action != "none"

    def drop(self, why: str) -> None:
        """The decision turned into no action after all (another decision recorded first)."""
        self.decision.action, self.decision.reason = "none", why
        self.spec, self.message, self.checks = None, None, None


def _nothing(reason: str, features: dict | None = None) -> Proposal:
    return Proposal(Decision(action="none", reason=reason), None, None, reason, None, learner_features=features)


def propose(session: Session, tenant: Tenant, customer: Customer, *, now: datetime, writer,
            events=(), state_changed: bool = False, test_events: bool = False) -> Proposal:
    """Decide (read-only) and write the message; a decision to do nothing is a proposal
    too (its trace is kept). A live decision counts only live interventions against the
    repeat limits. With a model, the agent chooses among the options the rules
    allow (docs/ai.md, "The agent")."""
    if tenant.kill_switch_active:
        return _nothing("the kill switch is on")
    specs = context.specs(session)
    if not specs:
        return _nothing("no active playbooks")
    live_only = not (test_events or customer.test)
    user = context.user_context(session, customer, specs, now)
    held_out = holdout.is_held_out(tenant, customer.id)
    config = tenant_config.read(tenant.config)
    learner = context.learner(session, customer, specs, config.decision_features or [])
    policy = context.policy_of(config)
    history = context.history(session, customer.id, now, live_only=live_only, held_out=held_out, policy=policy)
    made = decide(user, specs, history, now=now, events=events, state_changed=state_changed, learner=learner)
    decision_id = new_id()
    run = None
    if agent_service.wanted(writer, config, made):
        run = agent_service.run(session, tenant.id, customer, made, specs, writer=writer, config=config, now=now,
                                draft=drafter(tenant, customer, specs, writer))
        made = agent_service.apply(made, run)
    if run is not None and run.fallback_reason:
        made.reasoning = f"{made.reasoning or ''} (the agent fell back to the learner: {run.fallback_reason})".strip()
    if made.action == "none":
        return Proposal(made, None, None, made.reason or "", None, live_only, held_out, learner.features,
                        decision_id, run, policy)
    spec = next(s for s in specs if s.id == made.playbook_id)
    if made.action != "send":
        return Proposal(made, spec, None, made.reasoning or "", None, live_only, held_out, learner.features,
                        decision_id, run, policy)
    option_id = f"{spec.id}:{made.channel}"
    drafted = run.draft_for(option_id) if run is not None and run.decided_by == "agent" else None
    if drafted is not None:
        return Proposal(made, spec, drafted["message"], made.reasoning or "", drafted["checks"], live_only, held_out,
                        learner.features, decision_id, run, policy)
    draft = write(writer, tenant, customer, spec, made.channel, made.reasoning or "")
    reasoning = draft.reasoning
    if run is not None and run.decided_by == "agent":
        reasoning = made.reasoning or draft.reasoning
    elif run is not None and run.fallback_reason not in reasoning:   # say why the agent did not decide
        reasoning = f"{reasoning} (the agent fell back to the learner: {run.fallback_reason})"
    return Proposal(made, spec, draft.message, reasoning, draft.checks, live_only, held_out, learner.features,
                    decision_id, run, policy)


def write(writer, tenant: Tenant, customer: Customer, spec: PlaybookSpec, channel: str, reasoning: str):
    """The message of a send on this channel: the model's, or the template."""
    facts = {f: getattr(customer, f) for f in USER_FIELDS}
    brand = tenant.brand_context
    template = messages.render_template(spec.strategy_hints.get("message_template"), channel=channel,
                                        user=facts, hints=spec.strategy_hints, brand=brand)
    return writer.write(channel=channel, user=facts,
                        playbook={"name": spec.name, "goal": spec.strategy_hints.get("goal"),
                                  "hints": spec.strategy_hints},
                        brand=brand, decision_reasoning=reasoning, template_message=template)


def drafter(tenant: Tenant, customer: Customer, specs, writer):
    """The agent's draft_message: the writer and its quality checks for one send option."""
    def draft(option: dict):
        spec = next(s for s in specs if s.id == option["playbook_id"])
        return write(writer, tenant, customer, spec, option["channel"],
                     f"The agent considers playbook {spec.name!r} on {option['channel']}.")
    return draft


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
                     features=proposal.learner_features, choice=learned.choice, test=test, now=now,
                     decision_id=proposal.decision_id, **keys)


def keep_trace(session: Session, tenant: Tenant, customer: Customer, proposal: Proposal, *, now: datetime,
               test: bool, intervention_id: str | None = None, external_action_id: str | None = None) -> None:
    """The decision's trace, keyed to what it made (docs/decisions.md, "The decision trace")."""
    trace.store(session, tenant.id, trace.of_proposal(proposal, customer.id, now), test=test,
                intervention_id=intervention_id, external_action_id=external_action_id)


def record_nothing(session: Session, tenant_id: str, user_id: str, proposal: Proposal, *,
                   now: datetime, test: bool) -> None:
    """A decision that ended in no action: only its trace is kept, so "why did this user
    not get a message" has an answer. The agent's steps, when it ran, are still emitted. A
    decision that only repeats the user's last one (no action, same reason: the sweep
    asking again every minute) keeps no new trace (docs/decisions.md, "The decision trace")."""
    steps = agent_events(proposal, user_id, now)
    if steps:
        outbox.record_many(session, tenant_id, steps, now=now, test=test)
    elif trace.repeats_last(session, tenant_id, user_id, proposal.decision.reason, test=test):
        return
    trace.store(session, tenant_id, trace.of_proposal(proposal, user_id, now), test=test)


def _hold_out(session: Session, intervention: Intervention, now: datetime) -> Intervention:
    """A held-out user's decision: kept, never delivered, and no webhook event (a receiver
    acting on decision.recommended would contact the user and spoil the comparison). Its
    attribution window opens now, as a delivery's would (docs/decisions.md, "Holdout and
    uplift")."""
    outcomes.open_window(session, intervention, now)
    return intervention


def agent_events(proposal: Proposal, user_id: str, now: datetime) -> list[tuple[str, dict]]:
    """One agent.action per tool call the agent's loop executed, in step order; arguments
    and summaries were scrubbed of e-mail addresses and secrets when recorded
    (docs/webhooks.md)."""
    run = proposal.agent
    if run is None:
        return []
    return [("agent.action", {"decision_id": proposal.decision_id, "user_id": user_id, "step": step["step"],
                              "tool": step["tool"], "arguments": step["arguments"],
                              "result_summary": step["result_summary"], "duration_ms": step["duration_ms"],
                              "at": now.isoformat()}) for step in run.steps]


def record(session: Session, tenant: Tenant, customer: Customer, proposal: Proposal, *,
           now: datetime, test: bool = False) -> Intervention | None:
    """Write the intervention (or, for an external action, its dispatch) and emit
    decision.recommended (and intervention.escalated). `test`: events tracked with a
    test key caused the decision."""
    made, spec = proposal.decision, proposal.spec
    metrics.bump(metrics.DECISIONS, decided_by=trace.decided_by(made, proposal.agent), action=made.action)
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
            reason=made.reasoning if made.action == "escalate" else None, test=test, decision_id=proposal.decision_id,
            planned_at=now, approved_at=now if status == "approved" else None, updated_at=now)
        session.add(intervention)
        session.flush()
        if status == "held_out":   # logged like any decision; its outcome trains nothing (docs/decisions.md)
            _log_learned(session, tenant, customer, proposal, test, now, intervention_id=intervention.id)
            keep_trace(session, tenant, customer, proposal, now=now, test=test, intervention_id=intervention.id)
            return _hold_out(session, intervention, now)
        if status == "approved":
            pipeline.start(session, intervention, now=now)
    action_id = _dispatch(session, tenant, customer, proposal, now, test) if made.action == "external_action" else None
    _log_learned(session, tenant, customer, proposal, test, now,
                 intervention_id=intervention.id if intervention else None, external_action_id=action_id)
    keep_trace(session, tenant, customer, proposal, now=now, test=test,
               intervention_id=intervention.id if intervention else None, external_action_id=action_id)
    events = agent_events(proposal, customer.id, now) + [("decision.recommended", {
        "user_id": customer.id, "playbook_id": spec.id, "action": made.action, "channel": made.channel,
        "action_type": made.action_type, "action_id": action_id, "confidence": made.confidence,
        "reasoning": proposal.reasoning, "intervention_id": intervention.id if intervention else None,
        "status": intervention.status if intervention else None, "decided_at": now.isoformat(),
        "decision_id": proposal.decision_id, "propensity": trace.propensity_of(made)})]
    if made.action == "escalate" and intervention.status != "shadow":
        events.append(("intervention.escalated", {
            "intervention_id": intervention.id, "user_id": customer.id, "playbook_id": spec.id,
            "reason": made.reasoning, "escalated_at": now.isoformat()}))
    outbox.record_many(session, tenant.id, events, now=now, test=test)
    return intervention
