"""POST /api/decisions/recommend: which of the caller's available actions to take for a
user, learned from the outcomes observed so far (docs/decisions.md, "Recommend").

Each action's chance of success is estimated from its reported outcomes with a uniform
prior, blending outcomes among users in the same lifecycle stage (full weight) with all
of the tenant's (half weight): (1 + s_stage + s_all/2) / (2 + n_stage + n_all/2). With
no outcomes every action is at 0.5 and the caller's order breaks the tie.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..customers import service as customers
from ..external.models import ExternalAction
from ..outbox import service as outbox

SUCCESS, FAILURE = ("completed", "partial"), ("rejected", "ignored")


@dataclass(frozen=True)
class Option:
    action: str
    estimate: float
    successes: int
    trials: int
    stage_successes: int
    stage_trials: int

    def as_dict(self) -> dict:
        return {"action": self.action, "parameters": {}, "confidence": self.estimate,
                "reasoning": self.explain()}

    def explain(self) -> str:
        if not self.trials:
            return f"{self.action}: no outcomes reported yet (prior 0.5)"
        return (f"{self.action}: {self.stage_successes} of {self.stage_trials} succeeded for users in this stage, "
                f"{self.successes} of {self.trials} overall (estimate {self.estimate:.2f})")


def _counts(session: Session, actions: list[str], stage: str | None) -> dict[str, tuple[int, int, int, int]]:
    decided = ExternalAction.outcome_status.in_(SUCCESS + FAILURE)
    won = ExternalAction.outcome_status.in_(SUCCESS)
    same = ExternalAction.lifecycle_stage == stage
    rows = session.execute(
        select(ExternalAction.action_type, func.count().filter(won), func.count().filter(decided),
               func.count().filter(won & same), func.count().filter(decided & same))
        .where(ExternalAction.action_type.in_(actions), ExternalAction.test.is_(False))
        .group_by(ExternalAction.action_type)).all()
    return {r[0]: tuple(r[1:]) for r in rows}


def recommend(session: Session, tenant_id: str, *, user_id: str, available: list[str], domain: str | None,
              now: datetime, test: bool) -> dict:
    customer = customers.get(session, user_id)
    actions = list(dict.fromkeys(available))
    counts = _counts(session, actions, customer.lifecycle_stage)
    options = []
    for action in actions:
        s_all, n_all, s_stage, n_stage = counts.get(action, (0, 0, 0, 0))
        estimate = (1 + s_stage + s_all / 2) / (2 + n_stage + n_all / 2)
        options.append(Option(action, round(estimate, 4), s_all, n_all, s_stage, n_stage))
    ranked = sorted(options, key=lambda o: -o.estimate)  # stable: the caller's order breaks ties
    best = ranked[0]
    result = {
        "user_id": customer.id, "domain": domain,
        "recommendation": {**best.as_dict(), "reasoning": _why(best, ranked)},
        "alternatives": [o.as_dict() for o in ranked[1:]],
        "user_context": {"lifecycle_stage": customer.lifecycle_stage, "activation_score": customer.activation_score,
                         "engagement_score": customer.engagement_score, "risk_level": customer.risk_level},
    }
    outbox.record(session, tenant_id, "decision.recommended", {
        "user_id": customer.id, "action": best.action, "domain": domain, "confidence": best.estimate,
        "alternatives": [o.action for o in ranked[1:]], "decided_at": now.isoformat()}, now=now, test=test)
    return result


def _why(best: Option, ranked: list[Option]) -> str:
    if len(ranked) == 1:
        return best.explain() + "; the only available action"
    runner = ranked[1]
    if best.estimate == runner.estimate:
        return best.explain() + "; tied with the next option, kept in the order given"
    return best.explain() + f"; ahead of {runner.action} ({runner.estimate:.2f})"
