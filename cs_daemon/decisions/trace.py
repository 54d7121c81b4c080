"""The decision trace: everything one decision used and produced, so "why did this user
get this message, and why not that one?" has an answer (docs/decisions.md, "The decision
trace").

One trace per engine decision (also one that ends in no action, a held-out or a shadow
one) and per recommendation, its id the decision's `decision_id`; a dry run builds the
same object and stores nothing. The shape:

    {decision_id, user_id, decided_by, features, rules: [each playbook's verdict and why],
     options: [{option, estimate, ...}], propensity, agent: {steps, fallback_reason},
     drafts: [{option_id, message, checks}], choice, created_at}

and, besides, kind, action, reason, playbook_id, channel, tokens, intervention_id,
external_action_id.
"""

from __future__ import annotations

import math
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..engine.decisions import NOT_MATCHED, Decision
from ..errors import NotFound
from ..learning import service as learning
from .models import DecisionTrace

RECENT = 20                 # a customer's decisions shown with them
REASON_CHARS = 200


def decided_by(decision: Decision, agent=None) -> str:
    """`agent` when the agent loop chose, `learner` when the learner chose among more than
    one option, else `rules`."""
    by = getattr(agent, "decided_by", None)
    if by:
        return by
    return "learner" if any(len(learned.choice.estimates) > 1 for learned in decision.learned) else "rules"


def rules_of(decision: Decision) -> list[dict]:
    """Each playbook's verdict and why, in the order the engine considered them (those
    whose entry conditions did not match written out here, as Decision.rules would)."""
    out = []
    for pb in decision.considered:
        verdict = decision.verdicts.get(pb.id)
        out.append({"playbook_id": pb.id, **verdict.as_dict()} if verdict is not None else
                   {"playbook_id": pb.id, "name": pb.name, "matched": False, "verdict": "not_matched",
                    "why": NOT_MATCHED, "confidence": None, "channel": None, "score": None})
    return out


def options_of(decision: Decision, agent=None) -> list[dict]:
    """The options the choice was made among, with the learner's estimates: the options
    the rules allowed when the agent ran (docs/ai.md, "The agent"); else each learned
    choice's options (scope `playbook`, or `channel:<playbook id>`); without a learned
    choice, the eligible playbooks as the rules ranked them."""
    if agent is not None and decision.options:
        return [{"option": o["option_id"], "kind": "agent", **o} for o in decision.options]
    if decision.learned:
        return [{**option, "kind": learned.kind, "scope": learned.scope}
                for learned in decision.learned for option in learning.options_of(learned.choice)]
    ranked = [v for v in decision.verdicts.values() if v.verdict in ("picked", "eligible")]
    return [{"option": v.playbook_id, "kind": "playbook", "estimate": None, "score": v.score,
             "probability": 1.0 if v.verdict == "picked" else 0.0}
            for v in sorted(ranked, key=lambda v: -(v.score or 0))]


def propensity_of(decision: Decision) -> float | None:
    """The probability of the whole choice: the product of the learned choices'
    propensities; 1 for a choice the rules made; none for no action."""
    if decision.action == "none":
        return None
    return round(math.prod(learned.choice.propensity for learned in decision.learned), 4)


def choice_of(decision: Decision, reasoning: str | None, agent=None) -> dict:
    out = {"action": decision.action, "playbook_id": decision.playbook_id, "channel": decision.channel,
           "action_type": decision.action_type, "severity": decision.severity,
           "confidence": decision.confidence, "reasoning": reasoning or decision.reasoning,
           "reason": decision.reason}
    chosen = getattr(agent, "choice", None)
    if isinstance(chosen, dict):
        out.update(chosen)
    return out


def drafts_of(decision: Decision, message: str | None, checks, agent=None) -> list[dict]:
    """The agent's drafts with their quality checks; without an agent, the message written
    for the chosen option."""
    drafts = getattr(agent, "drafts", None)
    if drafts:
        return [dict(d) for d in drafts]
    if message is None:
        return []
    return [{"option_id": f"{decision.playbook_id}:{decision.channel}", "message": message, "checks": checks}]


def agent_of(agent) -> dict:
    return {"steps": [dict(s) for s in (getattr(agent, "steps", None) or [])],
            "fallback_reason": getattr(agent, "fallback_reason", None)}


def build(*, decision_id: str, user_id: str, decision: Decision, features: dict | None, now: datetime,
          message: str | None = None, checks=None, reasoning: str | None = None, agent=None) -> dict:
    """The trace of an engine decision (or a dry run), as the API shows it."""
    return {
        "decision_id": decision_id, "kind": "engine", "user_id": user_id,
        "decided_by": decided_by(decision, agent), "action": decision.action, "reason": decision.reason,
        "playbook_id": decision.playbook_id, "channel": decision.channel,
        "features": dict(features or {}), "rules": rules_of(decision), "options": options_of(decision, agent),
        "propensity": propensity_of(decision), "agent": agent_of(agent),
        "drafts": drafts_of(decision, message, checks, agent), "choice": choice_of(decision, reasoning, agent),
        "tokens": int(getattr(agent, "tokens", 0) or 0),
        "intervention_id": None, "external_action_id": None, "created_at": now,
    }


def of_proposal(proposal, user_id: str, now: datetime) -> dict:
    return build(decision_id=proposal.decision_id, user_id=user_id, decision=proposal.decision,
                 features=proposal.learner_features, now=now, message=proposal.message, checks=proposal.checks,
                 reasoning=proposal.reasoning, agent=getattr(proposal, "agent", None))


def repeats_last(session: Session, tenant_id: str, user_id: str, reason: str | None, *, test: bool) -> bool:
    """Whether the user's latest engine decision already ended in no action for this reason."""
    last = session.execute(
        select(DecisionTrace.action, DecisionTrace.reason, DecisionTrace.test)
        .where(DecisionTrace.tenant_id == tenant_id, DecisionTrace.user_id == user_id, DecisionTrace.kind == "engine")
        .order_by(DecisionTrace.created_at.desc()).limit(1)).first()
    return last is not None and tuple(last) == ("none", reason, test)


def store(session: Session, tenant_id: str, trace: dict, *, test: bool, intervention_id: str | None = None,
          external_action_id: str | None = None) -> DecisionTrace:
    fallback = trace["agent"].get("fallback_reason")
    row = DecisionTrace(
        id=trace["decision_id"], tenant_id=tenant_id, user_id=trace["user_id"], kind=trace["kind"],
        decided_by=trace["decided_by"], action=trace["action"], reason=trace.get("reason"),
        playbook_id=trace.get("playbook_id"), channel=trace.get("channel"), features=trace["features"],
        rules=trace["rules"], options=trace["options"], propensity=trace["propensity"], agent=trace["agent"],
        fallback_reason=str(fallback)[:REASON_CHARS] if fallback else None, drafts=trace["drafts"],
        choice=trace["choice"], tokens=trace["tokens"], intervention_id=intervention_id,
        external_action_id=external_action_id, test=test, created_at=trace["created_at"])
    session.add(row)
    return row


def recommendation(*, decision_id: str, user_id: str, features: dict, choice, domain: str | None,
                   now: datetime) -> dict:
    """The trace of a recommendation: the learner's options and its pick."""
    best = choice.chosen
    return {
        "decision_id": decision_id, "kind": "recommend", "user_id": user_id,
        "decided_by": "learner" if len(choice.estimates) > 1 else "rules", "action": best.option,
        "reason": None, "playbook_id": None, "channel": None, "features": dict(features), "rules": [],
        "options": learning.options_of(choice), "propensity": round(choice.propensity, 4),
        "agent": agent_of(None), "drafts": [],
        "choice": {"action": best.option, "confidence": round(best.mean, 4), "domain": domain},
        "tokens": 0, "intervention_id": None, "external_action_id": None, "created_at": now,
    }


def public(row: DecisionTrace) -> dict:
    return {"decision_id": row.id, "kind": row.kind, "user_id": row.user_id, "decided_by": row.decided_by,
            "action": row.action, "reason": row.reason, "playbook_id": row.playbook_id, "channel": row.channel,
            "features": row.features, "rules": row.rules, "options": row.options, "propensity": row.propensity,
            "agent": row.agent, "drafts": row.drafts, "choice": row.choice, "tokens": row.tokens,
            "intervention_id": row.intervention_id, "external_action_id": row.external_action_id,
            "test": row.test, "created_at": row.created_at}


def of_intervention(session: Session, intervention_id: str) -> dict:
    """The trace of the decision that made this intervention; NotFound for an intervention
    without one (made by hand, or its trace past retention)."""
    row = session.scalars(select(DecisionTrace).where(DecisionTrace.intervention_id == intervention_id)
                          .order_by(DecisionTrace.created_at.desc()).limit(1)).first()
    if row is None:
        raise NotFound("no decision trace for this intervention")
    return public(row)


def recent_for_user(session: Session, user_id: str, limit: int = RECENT) -> list[dict]:
    """The user's latest engine decisions, newest first, those that ended in no action too."""
    rows = session.execute(
        select(DecisionTrace.id, DecisionTrace.created_at, DecisionTrace.action, DecisionTrace.decided_by,
               DecisionTrace.reason, DecisionTrace.playbook_id, DecisionTrace.channel,
               DecisionTrace.intervention_id)
        .where(DecisionTrace.user_id == user_id, DecisionTrace.kind == "engine")
        .order_by(DecisionTrace.created_at.desc(), DecisionTrace.id).limit(limit)).all()
    return [{"decision_id": r.id, "created_at": r.created_at, "action": r.action, "decided_by": r.decided_by,
             "reason": r.reason, "playbook_id": r.playbook_id, "channel": r.channel,
             "intervention_id": r.intervention_id} for r in rows]


def ai_summary(session: Session, since: datetime) -> dict:
    """The analytics `ai` block: live decisions in the range, those the agent made, the
    agent's fallbacks by reason, and the model tokens spent."""
    live = (DecisionTrace.created_at >= since, DecisionTrace.test.is_(False))
    total, by_agent, tokens = session.execute(
        select(func.count(), func.count().filter(DecisionTrace.decided_by == "agent"),
               func.coalesce(func.sum(DecisionTrace.tokens), 0)).where(*live)).one()
    fallbacks = session.execute(
        select(DecisionTrace.fallback_reason, func.count())
        .where(*live, DecisionTrace.fallback_reason.isnot(None))
        .group_by(DecisionTrace.fallback_reason)).all()
    return {"decisions": total, "agent_decisions": by_agent,
            "fallbacks_by_reason": {reason: n for reason, n in sorted(fallbacks)}, "tokens": int(tokens)}
