"""The learner's repository: load the counts a choice needs, log the choice, and fold an
outcome into the counts once (docs/decisions.md, "Learning" and "The decision log")."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any, Mapping

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from ..errors import ValidationFailed
from . import model
from .models import DecisionCount, DecisionLog

RANDOM = random.Random()        # the process's source of draws; tests seed it
JOIN_WINDOW = timedelta(days=7)  # an action dispatched this long after a recommendation joins it
_counts = DecisionCount.__table__


def features_of(customer, traits_named: list[str], context: Mapping[str, Any] | None = None) -> dict:
    """The caller's scalar context values, the named traits, then the user's stage and
    risk level (a later one wins a name)."""
    out = {k: v for k, v in (context or {}).items() if _scalar(v)}
    traits = customer.traits or {}
    out.update({name: traits[name] for name in traits_named if _scalar(traits.get(name))})
    out.update(lifecycle_stage=customer.lifecycle_stage, risk_level=customer.risk_level)
    return out


def _scalar(value) -> bool:
    return isinstance(value, (str, int, float, bool)) and value is not None


def counts(session: Session, scope: str, options: list[str], features: Mapping[str, object]) -> dict:
    """What the model needs for these options and features, in one indexed query."""
    rows = session.execute(select(DecisionCount.option, DecisionCount.key, DecisionCount.successes,
                                  DecisionCount.trials)
                           .where(DecisionCount.scope == scope, DecisionCount.option.in_(options),
                                  DecisionCount.key.in_(model.keys_of(features)))).all()
    return {(o, k): model.Tally(s, n) for o, k, s, n in rows}


def counts_by_scope(session: Session, scopes: list[str], features: Mapping[str, object]) -> dict[str, dict]:
    """The counts of every option of these scopes under the user's keys, per scope."""
    out: dict[str, dict] = {scope: {} for scope in scopes}
    if not scopes:
        return out
    rows = session.execute(select(DecisionCount.scope, DecisionCount.option, DecisionCount.key,
                                  DecisionCount.successes, DecisionCount.trials)
                           .where(DecisionCount.scope.in_(scopes),
                                  DecisionCount.key.in_(model.keys_of(features)))).all()
    for scope, o, k, s, n in rows:
        out[scope][(o, k)] = model.Tally(s, n)
    return out


def options_of(choice: model.Choice) -> list[dict]:
    return [{"option": e.option, "estimate": round(e.mean, 4), "uncertainty": round(e.uncertainty, 4),
             "successes": e.successes, "trials": e.trials, "overall_successes": e.overall_successes,
             "overall_trials": e.overall_trials, "probability": round(choice.probabilities.get(e.option, 0.0), 4)}
            for e in choice.estimates]


def log(session: Session, tenant_id: str, *, kind: str, scope: str, user_id: str, features: dict,
        choice: model.Choice, test: bool, now: datetime, domain: str | None = None,
        intervention_id: str | None = None, external_action_id: str | None = None,
        decision_id: str | None = None) -> DecisionLog:
    row = DecisionLog(tenant_id=tenant_id, kind=kind, scope=scope, user_id=user_id, domain=domain,
                      features=features, options=options_of(choice), choice=choice.option,
                      propensity=choice.propensity, decided_by="learner" if len(choice.estimates) > 1 else "rules",
                      intervention_id=intervention_id, external_action_id=external_action_id, test=test,
                      created_at=now, decision_id=decision_id)
    session.add(row)
    session.flush()
    return row


def learn(session: Session, tenant_id: str, scope: str, option: str, features: Mapping[str, object],
          success: bool) -> None:
    """Add one outcome under every key of these features."""
    rows = [{"tenant_id": tenant_id, "scope": scope, "option": option, "key": key,
             "successes": int(success), "trials": 1} for key in model.keys_of(features)]
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(_counts)
    stmt = stmt.on_conflict_do_update(
        index_elements=["tenant_id", "scope", "option", "key"],
        set_={"successes": _counts.c.successes + stmt.excluded.successes,
              "trials": _counts.c.trials + stmt.excluded.trials})
    session.execute(stmt, rows)


def settle(session: Session, row: DecisionLog, success: bool, *, now: datetime, live: bool) -> bool:
    """Record the outcome of a logged decision, once (a conditional update); a live one
    trains the model. False when it was already settled."""
    done = session.execute(update(DecisionLog).where(DecisionLog.id == row.id, DecisionLog.success.is_(None))
                           .values(success=success, outcome_at=now)
                           .execution_options(synchronize_session=False)).rowcount
    if not done:
        return False
    if live and not row.test:
        learn(session, row.tenant_id, row.scope, row.choice, row.features, success)
    return True


def join_action(session: Session, action, *, decision_id: str | None) -> DecisionLog | None:
    """Join a dispatched external action to the recommendation it follows: the one named,
    else the user's latest unjoined recommendation of that action type in JOIN_WINDOW."""
    query = select(DecisionLog).where(DecisionLog.kind == "recommend", DecisionLog.external_action_id.is_(None),
                                      DecisionLog.user_id == action.user_id)
    if decision_id is not None:
        query = query.where(DecisionLog.id == decision_id)
    else:
        query = query.where(DecisionLog.choice == action.action_type,
                            DecisionLog.created_at >= action.created_at - JOIN_WINDOW,
                            DecisionLog.created_at <= action.created_at)
    row = session.scalars(query.order_by(DecisionLog.created_at.desc()).limit(1)).first()
    if row is None:
        return None
    if row.choice != action.action_type:   # its outcome would teach the action not taken
        raise ValidationFailed(f"decision {row.id} recommended {row.choice!r}, not {action.action_type!r}",
                               [{"field": "decision_id", "message": f"recommended {row.choice!r}; "
                                                                   f"dispatch that action type, or no decision_id"}])
    done = session.execute(update(DecisionLog).where(DecisionLog.id == row.id,
                                                     DecisionLog.external_action_id.is_(None))
                           .values(external_action_id=action.id)
                           .execution_options(synchronize_session=False)).rowcount
    return row if done else None


def on_action_outcome(session: Session, action, *, now: datetime) -> None:
    """An external action's outcome: `completed`/`partial` a success, `rejected`/`ignored`
    a failure. It settles the decisions joined to it; one that no recommendation led to
    still teaches the action's overall and per-stage estimates."""
    success = action.outcome_status in ("completed", "partial")
    rows = session.scalars(select(DecisionLog).where(DecisionLog.external_action_id == action.id)).all()
    for row in rows:
        settle(session, row, success, now=now, live=not action.test)
    if not any(r.kind == "recommend" for r in rows) and not action.test:
        learn(session, action.tenant_id, "action", action.action_type,
              {"lifecycle_stage": action.lifecycle_stage} if action.lifecycle_stage else {}, success)


def on_intervention_outcome(session: Session, iv, *, now: datetime) -> None:
    """An intervention's outcome: `positive` a success, `negative`/`neutral` a failure."""
    rows = session.scalars(select(DecisionLog).where(DecisionLog.intervention_id == iv.id)).all()
    for row in rows:
        settle(session, row, iv.outcome == "positive", now=now, live=not iv.test)
