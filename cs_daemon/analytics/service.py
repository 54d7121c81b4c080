"""GET /api/analytics: figures for 7, 30 or 90 days (docs/api.md, "Analytics"), test data excluded.

Every figure comes from the customers table, which is itself the per-user rollup of the
events (ingest keeps each user's stage, risk and last activity current as events arrive,
the sweep applies time decay), and from the interventions table: one grouped pass over
each, and the rest is added up here. No event is read, so the cost does not grow with
event volume. The `ai` block counts the range's decision traces (docs/ai.md, "Cost").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import and_, case, func, select
from sqlalchemy.orm import Session

from ..customers.models import Customer
from ..decisions import trace
from ..interventions.models import Intervention
from ..playbooks.models import Playbook
from . import uplift

RANGES = {"7d": 7, "30d": 30, "90d": 90}
DECIDED = ("positive", "negative", "neutral")


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def report(session: Session, *, range_: str, now: datetime) -> dict:
    since = now - timedelta(days=RANGES[range_])
    people = _customers(session, since)
    work = _interventions(session, since)
    playbooks = {pid: (name, area) for pid, name, area in session.execute(
        select(Playbook.id, Playbook.name, Playbook.lifecycle_area))}
    total = sum(g.count for g in work)
    delivered = sum(g.count for g in work if g.status == "delivered")
    failed = sum(g.count for g in work if g.status == "failed")
    positive = sum(g.count for g in work if g.outcome == "positive")
    decided = sum(g.count for g in work if g.outcome in DECIDED)
    timed = sum(g.timed for g in work)
    areas = _by_area(work, playbooks)
    return {
        "range": range_,
        "kpis": {"total_users": people.total, "total_interventions": total,
                 "positive_outcome_rate": _rate(positive, decided), "churn_rate": _rate(people.churned, people.total),
                 "retention_rate": _rate(people.active, people.total)},
        "roi": {"recovered_users": _recovered(session, since),
                "intervention_success_rate": _rate(delivered, delivered + failed),
                "avg_time_to_outcome_days": round(sum(g.seconds for g in work) / timed / 86400, 2) if timed else None,
                "outcomes_by_lifecycle_area": areas,
                "uplift": _uplift(session, since, playbooks)},
        "lifecycle_distribution": [{"stage": k, "count": n} for k, n in sorted(people.by_stage.items())],
        "risk_distribution": [{"risk_level": k, "count": n} for k, n in sorted(people.by_risk.items())],
        "intervention_stats": [{"channel": c, "total": _sum(work, channel=c),
                                "delivered": _sum(work, channel=c, status="delivered"),
                                "failed": _sum(work, channel=c, status="failed")}
                               for c in sorted({g.channel for g in work})],
        "outcome_stats": [{"outcome": o, "count": _sum(work, outcome=o)}
                          for o in sorted({g.outcome for g in work if g.outcome is not None})],
        "top_playbooks": _top_playbooks(work, playbooks),
        "lifecycle_area_breakdown": areas,
        "ai": trace.ai_summary(session, since),
    }


@dataclass
class People:
    total: int = 0
    active: int = 0
    churned: int = 0
    by_stage: Counter = field(default_factory=Counter)
    by_risk: Counter = field(default_factory=Counter)


def _customers(session: Session, since: datetime) -> People:
    """One pass over the tenant's live customers, grouped by stage and risk."""
    people = People()
    for stage, risk, n, active in session.execute(
            select(Customer.lifecycle_stage, Customer.risk_level, func.count(),
                   func.count().filter(Customer.last_activity_at >= since))
            .where(Customer.test.is_(False)).group_by(Customer.lifecycle_stage, Customer.risk_level)):
        people.total += n
        people.active += active
        people.churned += n if stage == "churned" else 0
        people.by_stage[stage] += n
        people.by_risk[risk] += n
    return people


@dataclass(frozen=True)
class Group:
    """Interventions of the range that share playbook, channel, status and outcome."""

    playbook_id: str | None
    channel: str
    status: str
    outcome: str | None
    count: int
    timed: int            # decided ones with a delivery and an outcome time
    seconds: float        # their delivery-to-outcome time, summed


def _in_range(since: datetime):
    return and_(Intervention.test.is_(False), Intervention.planned_at >= since,
                Intervention.status.not_in(("shadow", "held_out")), Intervention.channel != "escalate")


def _interventions(session: Session, since: datetime) -> list[Group]:
    """One pass over the range's interventions."""
    timed = and_(Intervention.outcome.in_(DECIDED), Intervention.delivered_at.isnot(None),
                 Intervention.outcome_at.isnot(None))
    elapsed = _seconds_between(session, Intervention.delivered_at, Intervention.outcome_at)
    columns = (Intervention.playbook_id, Intervention.channel, Intervention.status, Intervention.outcome)
    rows = session.execute(select(*columns, func.count(), func.count().filter(timed),
                                  func.coalesce(func.sum(case((timed, elapsed))), 0))
                           .where(_in_range(since)).group_by(*columns))
    return [Group(pid, ch, st, out, n, t, float(sec)) for pid, ch, st, out, n, t, sec in rows]


def _seconds_between(session: Session, start, end):
    if session.get_bind().dialect.name == "postgresql":
        return func.extract("epoch", end - start)
    return (func.julianday(end) - func.julianday(start)) * 86400.0


def _recovered(session: Session, since: datetime) -> int:
    """Distinct users with a positive outcome in the range."""
    return session.scalar(select(func.count(func.distinct(Intervention.user_id)))
                          .where(_in_range(since), Intervention.outcome == "positive")) or 0


def _sum(work: list[Group], **match) -> int:
    return sum(g.count for g in work if all(getattr(g, k) == v for k, v in match.items()))


def _by_area(work: list[Group], playbooks: dict) -> list[dict]:
    areas: dict[str | None, Counter] = {}
    for g in work:
        if g.playbook_id not in playbooks:
            continue
        tally = areas.setdefault(playbooks[g.playbook_id][1], Counter())
        tally["interventions"] += g.count
        if g.outcome in DECIDED:
            tally[g.outcome] += g.count
    return [{"lifecycle_area": area, "interventions": t["interventions"], "positive": t["positive"],
             "negative": t["negative"], "neutral": t["neutral"]}
            for area, t in sorted(areas.items(), key=lambda item: (item[0] is None, item[0] or ""))]


def uplift_report(session: Session, *, range_: str, now: datetime) -> dict:
    """Only `roi.uplift` of the report, for `cs analytics uplift`."""
    playbooks = {pid: (name, area) for pid, name, area in session.execute(
        select(Playbook.id, Playbook.name, Playbook.lifecycle_area))}
    return {"range": range_, "uplift": _uplift(session, now - timedelta(days=RANGES[range_]), playbooks)}


def _uplift(session: Session, since: datetime, playbooks: dict) -> list[dict]:
    """Each playbook's uplift over the range's interventions (docs/decisions.md, "Holdout
    and uplift"), by name."""
    found = uplift.by_playbook(session, since=since)
    return [{"playbook_id": pid, "name": playbooks[pid][0], **found[pid]}
            for pid in sorted((p for p in found if p in playbooks), key=lambda p: (playbooks[p][0], p))]


def _top_playbooks(work: list[Group], playbooks: dict, limit: int = 5) -> list[dict]:
    tally: dict[str, Counter] = {}
    for g in work:
        if g.playbook_id in playbooks:
            t = tally.setdefault(g.playbook_id, Counter())
            t["interventions"] += g.count
            t["positive"] += g.count if g.outcome == "positive" else 0
            t["decided"] += g.count if g.outcome in DECIDED else 0
    ranked = sorted(tally.items(), key=lambda item: (-item[1]["interventions"], playbooks[item[0]][0], item[0]))
    return [{"playbook_id": pid, "name": playbooks[pid][0], "interventions": t["interventions"],
             "success_rate": round(t["positive"] / t["decided"], 4) if t["decided"] else None}
            for pid, t in ranked[:limit]]
