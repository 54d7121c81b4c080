"""POST /api/decisions/recommend: which of the caller's available actions to take for a
user, learned from the outcomes observed so far (docs/decisions.md, "Learning").

The learner (cs_daemon/learning) draws the choice by Thompson sampling from each action's
estimate for this kind of user; the decision is logged with its features, estimates and
propensity (and its trace kept: docs/decisions.md, "The decision trace"), and the
outcome of an external action dispatched after it trains the model.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from ..customers import service as customers
from ..learning import model, service as learning
from ..outbox import service as outbox
from ..tenants import config as tenant_config
from ..tenants.models import Tenant
from . import trace

SCOPE = "action"


def explain(e: model.Estimate, segment: str) -> str:
    if not e.overall_trials:
        return f"{e.option}: no outcomes reported yet (estimate {e.mean:.2f} ± {e.uncertainty:.2f})"
    return (f"{e.option}: {e.successes} of {e.trials} succeeded for {segment}, {e.overall_successes} of "
            f"{e.overall_trials} overall (estimate {e.mean:.2f} ± {e.uncertainty:.2f})")


def _as_dict(e: model.Estimate, segment: str) -> dict:
    return {"action": e.option, "parameters": {}, "confidence": round(e.mean, 4), "reasoning": explain(e, segment)}


def recommend(session: Session, tenant_id: str, *, user_id: str, available: list[str], domain: str | None,
              context: dict | None = None, now: datetime, test: bool) -> dict:
    customer = customers.get(session, user_id)
    tenant = session.get(Tenant, tenant_id)
    features = learning.features_of(customer, tenant_config.read(tenant.config).decision_features or [], context)
    actions = list(dict.fromkeys(available))
    choice = model.choose(actions, features, learning.counts(session, SCOPE, actions, features), learning.RANDOM)
    logged = learning.log(session, tenant_id, kind="recommend", scope=SCOPE, user_id=customer.id,
                          features=features, choice=choice, test=test, now=now, domain=domain)
    logged.decision_id = logged.id      # a recommendation's decision_id is its log row's id
    trace.store(session, tenant_id, trace.recommendation(decision_id=logged.id, user_id=customer.id,
                                                         features=features, choice=choice, domain=domain, now=now),
                test=test)
    segment = "segment (" + model.segment_key(features).replace("&", ", ") + ")"
    best = choice.chosen
    others = sorted((e for e in choice.estimates if e.option != best.option), key=lambda e: -e.mean)
    result = {
        "user_id": customer.id, "domain": domain, "decision_id": logged.id,
        "propensity": round(choice.propensity, 4),
        "recommendation": {**_as_dict(best, segment), "reasoning": _why(choice, others, segment)},
        "alternatives": [_as_dict(e, segment) for e in others],
        "user_context": {"lifecycle_stage": customer.lifecycle_stage, "activation_score": customer.activation_score,
                         "engagement_score": customer.engagement_score, "risk_level": customer.risk_level},
    }
    outbox.record(session, tenant_id, "decision.recommended", {
        "user_id": customer.id, "action": best.option, "domain": domain, "confidence": round(best.mean, 4),
        "decision_id": logged.id, "propensity": round(choice.propensity, 4),
        "alternatives": [e.option for e in others], "decided_at": now.isoformat()}, now=now, test=test)
    return result


def _why(choice: model.Choice, others: list[model.Estimate], segment: str) -> str:
    best = choice.chosen
    text = explain(best, segment)
    if not others:
        return text + "; the only available action"
    runner = others[0]
    if best.mean >= runner.mean:
        return text + f"; ahead of {runner.option} ({runner.mean:.2f}), picked in {choice.propensity:.0%} of draws"
    return (text + f"; explored: {runner.option} looks better ({runner.mean:.2f}) but this estimate is "
            f"uncertain enough to be picked in {choice.propensity:.0%} of draws")
