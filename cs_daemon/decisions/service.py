"""Deciding for a user: the dry run (nothing written), and the real thing."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from sqlalchemy.orm import Session

from ..agent import service as agent_service
from ..agent.run import AgentRun
from ..customers import service as customers
from ..db import new_id
from ..engine.decisions import Decision, decide
from ..tenants import config as tenant_config
from ..tenants.models import Tenant
from . import context, holdout, trace
from .record import drafter


def dry_run(session: Session, user_id: str, *, now: datetime, writer=None) -> tuple[Decision, object, dict]:
    """The decision the engine would take now, considering every active playbook as if its
    trigger had fired (and, for a live user, live events), with its trace; nothing is
    written (docs/decisions.md, "The decision trace")."""
    made, customer, _, kept = dry_run_with_agent(session, user_id, now=now, writer=writer)
    return made, customer, kept


def dry_run_with_agent(session: Session, user_id: str, *, now: datetime,
                       writer=None) -> tuple[Decision, object, AgentRun | None, dict]:
    """The dry run; with a model configured (`writer`) the agent runs too, and its answer
    is the decision. Nothing is written and nothing emitted but the tokens the model used,
    which count against the tenant's daily budget (docs/ai.md, "The agent")."""
    customer = customers.get(session, user_id)
    specs = context.specs(session)
    user = context.user_context(session, customer, specs, now)
    tenant = session.get(Tenant, customer.tenant_id)
    config = tenant_config.read(tenant.config)
    learner = context.learner(session, customer, specs, config.decision_features or [])
    held_out = holdout.is_held_out(tenant, customer.id)
    history = context.history(session, user_id, now, live_only=not customer.test, held_out=held_out,
                              policy=context.policy_of(config))
    made = decide(user, specs, history, now=now, every=True, learner=learner)
    if held_out and made.action == "send":   # what record.py would store (docs/decisions.md, "Holdout and uplift")
        made = replace(made, reason="held out: the user is in the holdout, so it would be recorded "
                                    "held_out and not sent")
    if tenant.kill_switch_active:   # what the engine would do now: nothing (each playbook's verdict still shown)
        made = Decision(action="none", reason="the kill switch is on", matched_playbooks=made.matched_playbooks,
                        verdicts=made.verdicts, considered=made.considered)
    run = None
    if writer is not None and agent_service.wanted(writer, config, made):
        run = agent_service.run(session, tenant.id, customer, made, specs, writer=writer, config=config, now=now,
                                draft=drafter(tenant, customer, specs, writer))
        made = agent_service.apply(made, run)
    return made, customer, run, trace.build(decision_id=new_id(), user_id=customer.id, decision=made,
                                            features=learner.features, now=now, agent=run)
