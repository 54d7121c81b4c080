"""POST /api/decisions/evaluate: how each single action, uniform random and the current
learned policy would have done on the logged recommendations with a reported outcome
(docs/decisions.md, "Evaluating a policy")."""

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


def _current(session: Session):
    """The learned policy as it stands: each logged choice's probability under it."""
    counts = {(o, k): model.Tally(s, n) for o, k, s, n in session.execute(
        select(DecisionCount.option, DecisionCount.key, DecisionCount.successes, DecisionCount.trials)
        .where(DecisionCount.scope == SCOPE))}
    rng = random.Random(SEED)

    def probability(d: evaluate.Logged) -> float:
        return model.probabilities(d.options, d.features, counts, rng, draws=DRAWS).get(d.choice, 0.0)
    return probability


def evaluate_policies(session: Session, *, since: datetime | None, domain: str | None) -> dict:
    logs = _logs(session, since, domain)
    actions = sorted({o for d in logs for o in d.options})
    estimates = [evaluate.snips("current", logs, _current(session)), evaluate.snips("uniform", logs, evaluate.uniform)]
    estimates += [evaluate.snips(f"action:{a}", logs, evaluate.single(a)) for a in actions]
    return {"decisions": len(logs), "estimates": [e.as_dict() for e in estimates]}
