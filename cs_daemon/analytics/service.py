"""GET /api/analytics: figures for 7, 30 or 90 days (decisions §12), test data excluded.

Every figure comes from the customers table (its state is kept current by ingest and
the sweep) and the interventions table, never from scanning events, so the cost does
not grow with event volume.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from ..customers.models import Customer
from ..interventions.models import Intervention
from ..playbooks.models import Playbook

RANGES = {"7d": 7, "30d": 30, "90d": 90}
DECIDED = ("positive", "negative", "neutral")


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def report(session: Session, *, range_: str, now: datetime) -> dict:
    since = now - timedelta(days=RANGES[range_])
    live_users = Customer.test.is_(False)
    in_range = and_(Intervention.test.is_(False), Intervention.planned_at >= since,
                    Intervention.status != "shadow", Intervention.channel != "escalate")

    total_users, active, churned = session.execute(select(
        func.count(), func.count().filter(Customer.last_activity_at >= since),
        func.count().filter(Customer.lifecycle_stage == "churned")).where(live_users)).one()
    total, delivered, failed, positive, decided, recovered = session.execute(select(
        func.count(), func.count().filter(Intervention.status == "delivered"),
        func.count().filter(Intervention.status == "failed"),
        func.count().filter(Intervention.outcome == "positive"),
        func.count().filter(Intervention.outcome.in_(DECIDED)),
        func.count(func.distinct(Intervention.user_id)).filter(Intervention.outcome == "positive"),
    ).where(in_range)).one()
    areas = _by_area(session, in_range)
    return {
        "range": range_,
        "kpis": {"total_users": total_users, "total_interventions": total,
                 "positive_outcome_rate": _rate(positive, decided), "churn_rate": _rate(churned, total_users),
                 "retention_rate": _rate(active, total_users)},
        "roi": {"recovered_users": recovered, "intervention_success_rate": _rate(delivered, delivered + failed),
                "avg_time_to_outcome_days": _avg_days_to_outcome(session, in_range),
                "outcomes_by_lifecycle_area": areas},
        "lifecycle_distribution": [{"stage": s, "count": n} for s, n in session.execute(
            select(Customer.lifecycle_stage, func.count()).where(live_users)
            .group_by(Customer.lifecycle_stage).order_by(Customer.lifecycle_stage))],
        "risk_distribution": [{"risk_level": r, "count": n} for r, n in session.execute(
            select(Customer.risk_level, func.count()).where(live_users)
            .group_by(Customer.risk_level).order_by(Customer.risk_level))],
        "intervention_stats": [{"channel": c, "total": t, "delivered": d, "failed": f} for c, t, d, f in session.execute(
            select(Intervention.channel, func.count(), func.count().filter(Intervention.status == "delivered"),
                   func.count().filter(Intervention.status == "failed"))
            .where(in_range).group_by(Intervention.channel).order_by(Intervention.channel))],
        "outcome_stats": [{"outcome": o, "count": n} for o, n in session.execute(
            select(Intervention.outcome, func.count()).where(in_range, Intervention.outcome.isnot(None))
            .group_by(Intervention.outcome).order_by(Intervention.outcome))],
        "top_playbooks": _top_playbooks(session, in_range),
        "lifecycle_area_breakdown": areas,
    }


def _avg_days_to_outcome(session: Session, in_range) -> float | None:
    rows = session.execute(select(Intervention.delivered_at, Intervention.outcome_at).where(
        in_range, Intervention.outcome.in_(DECIDED), Intervention.delivered_at.isnot(None),
        Intervention.outcome_at.isnot(None))).all()
    if not rows:
        return None
    return round(sum((o - d).total_seconds() for d, o in rows) / len(rows) / 86400, 2)


def _by_area(session: Session, in_range) -> list[dict]:
    rows = session.execute(
        select(Playbook.lifecycle_area, func.count(), func.count().filter(Intervention.outcome == "positive"),
               func.count().filter(Intervention.outcome == "negative"),
               func.count().filter(Intervention.outcome == "neutral"))
        .select_from(Intervention).join(Playbook, Playbook.id == Intervention.playbook_id)
        .where(in_range).group_by(Playbook.lifecycle_area).order_by(Playbook.lifecycle_area)).all()
    return [{"lifecycle_area": a, "interventions": n, "positive": p, "negative": neg, "neutral": neu}
            for a, n, p, neg, neu in rows]


def _top_playbooks(session: Session, in_range, limit: int = 5) -> list[dict]:
    rows = session.execute(
        select(Playbook.id, Playbook.name, func.count(), func.count().filter(Intervention.outcome == "positive"),
               func.count().filter(Intervention.outcome.in_(DECIDED)))
        .select_from(Intervention).join(Playbook, Playbook.id == Intervention.playbook_id)
        .where(in_range).group_by(Playbook.id, Playbook.name)
        .order_by(func.count().desc(), Playbook.name).limit(limit)).all()
    return [{"playbook_id": pid, "name": name, "interventions": n,
             "success_rate": round(pos / dec, 4) if dec else None} for pid, name, n, pos, dec in rows]
