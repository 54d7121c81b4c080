"""POST /api/decisions/evaluate: how each single action, uniform random and the current
learned policy would have done on the logged recommendations with a reported outcome:
self-normalised IPS, and doubly robust with the learner's estimates as the reward model
once it has counts (docs/decisions.md, "Evaluating a policy")."""

from __future__ import annotations

import random
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..learning import evaluate, model
from ..learning.models import DecisionCount, DecisionLog
from .recommend import SCOPE

MAX_DECISIONS = 20_000      # the latest ones of the range
DRAWS = 100                 # Monte Carlo draws for the current policy's probabilities
SEED = 0                    # the same logs give the same answer


def _logs(session: Session, since: datetime | None, domain: str | None) -> list[evaluate.Logged]:
    query = select(DecisionLog.options, DecisionLog.choice, DecisionLog.propensity, DecisionLog.success,
                   DecisionLog.features).where(DecisionLog.kind == "recommend", DecisionLog.test.is_(False),
                                               DecisionLog.success.isnot(None))
    if since is not None:
        query = query.where(DecisionLog.created_at >= since)
    if domain is not None:
        query = query.where(DecisionLog.domain == domain)
    rows = session.execute(query.order_by(DecisionLog.created_at.desc()).limit(MAX_DECISIONS)).all()
    return [evaluate.Logged(tuple(o["option"] for o in options), choice, propensity, success, features)
            for options, choice, propensity, success, features in rows]


def _counts(session: Session) -> dict:
    return {(o, k): model.Tally(s, n) for o, k, s, n in session.execute(
        select(DecisionCount.option, DecisionCount.key, DecisionCount.successes, DecisionCount.trials)
        .where(DecisionCount.scope == SCOPE))}


def _per_decision(compute):
    """`compute(d)` once per logged decision (the current policy's draws, the model's
    estimates), so SNIPS and doubly robust see the same figures."""
    seen: dict[int, dict] = {}

    def cached(d: evaluate.Logged) -> dict:
        if id(d) not in seen:
            seen[id(d)] = compute(d)
        return seen[id(d)]
    return cached


def evaluate_policies(session: Session, *, since: datetime | None, domain: str | None) -> dict:
    logs = _logs(session, since, domain)
    counts = _counts(session)
    rng = random.Random(SEED)
    policies = {"current": _per_decision(lambda d: model.probabilities(d.options, d.features, counts, rng,
                                                                       draws=DRAWS)),
                "uniform": evaluate.evenly}
    policies.update({f"action:{a}": evaluate.always(a) for a in sorted({o for d in logs for o in d.options})})
    rewards = _per_decision(lambda d: {o: model.estimate(o, d.features, counts).mean for o in d.options})
    estimates = []
    for name, policy in policies.items():
        row = evaluate.snips(name, logs, evaluate.chance(policy)).as_dict()
        robust = evaluate.doubly_robust(name, logs, policy, rewards) if counts else None
        if robust is not None and robust.success_rate is not None:
            row["doubly_robust"] = {"estimate": round(robust.success_rate, 4),
                                    "ci": [round(robust.ci[0], 4), round(robust.ci[1], 4)]}
        estimates.append(row)
    return {"decisions": len(logs), "estimates": estimates}
