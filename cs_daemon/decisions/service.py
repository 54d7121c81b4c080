"""Deciding for a user: the dry run (nothing written), and the real thing."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from ..customers import service as customers
from ..engine.decisions import Decision, decide
from ..tenants import config as tenant_config
from ..tenants.models import Tenant
from . import context


def dry_run(session: Session, user_id: str, *, now: datetime) -> tuple[Decision, object]:
    """The decision the engine would take now, considering every active playbook as if its
    trigger had fired (and, for a live user, live events); nothing is written."""
    customer = customers.get(session, user_id)
    specs = context.specs(session)
    user = context.user_context(session, customer, specs, now)
    tenant = session.get(Tenant, customer.tenant_id)
    config = tenant_config.read(tenant.config)
    learner = context.learner(session, customer, specs, config.decision_features or [])
    history = context.history(session, user_id, now, live_only=not customer.test, policy=context.policy_of(config))
    made = decide(user, specs, history, now=now, every=True, learner=learner)
    return made, customer
