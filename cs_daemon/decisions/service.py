"""Deciding for a user: the dry run (nothing written), and the real thing."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from ..customers import service as customers
from ..db import new_id
from ..engine.decisions import Decision, decide
from ..tenants import config as tenant_config
from ..tenants.models import Tenant
from . import context, trace


def dry_run(session: Session, user_id: str, *, now: datetime) -> tuple[Decision, object, dict]:
    """The decision the engine would take now, considering every active playbook as if its
    trigger had fired (and, for a live user, live events), with its trace; nothing is
    written (docs/decisions.md, "The decision trace")."""
    customer = customers.get(session, user_id)
    specs = context.specs(session)
    user = context.user_context(session, customer, specs, now)
    tenant = session.get(Tenant, customer.tenant_id)
    learner = context.learner(session, customer, specs, tenant_config.read(tenant.config).decision_features or [])
    made = decide(user, specs, context.history(session, user_id, now, live_only=not customer.test), now=now,
                  every=True, learner=learner)
    return made, customer, trace.build(decision_id=new_id(), user_id=customer.id, decision=made,
                                       features=learner.features, now=now)
