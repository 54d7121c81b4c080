"""Analytics."""

from __future__ import annotations

from typing import Any, Literal

from cs_daemon.analytics import service
from cs_daemon.playbooks.schemas import Uplift
from cs_daemon.schemas import Wire

from ..api import Api, Call

api = Api("Analytics")


class AnalyticsQuery(Wire):
    range: Literal["7d", "30d", "90d"] = "30d"


class Kpis(Wire):
    total_users: int
    total_interventions: int
    positive_outcome_rate: float
    churn_rate: float
    retention_rate: float


class PlaybookUplift(Uplift):
    playbook_id: str
    name: str


class Roi(Wire):
    recovered_users: int
    intervention_success_rate: float
    avg_time_to_outcome_days: float | None
    outcomes_by_lifecycle_area: list[dict[str, Any]]
    uplift: list[PlaybookUplift] = []     # extension (docs/decisions.md, "Holdout and uplift")


class Ai(Wire):
    """Decisions in the range, from their traces (docs/ai.md, "Cost")."""

    decisions: int
    agent_decisions: int
    fallbacks_by_reason: dict[str, int]
    tokens: int


class AnalyticsReport(Wire):
    range: str
    kpis: Kpis
    roi: Roi
    lifecycle_distribution: list[dict[str, Any]]
    risk_distribution: list[dict[str, Any]]
    intervention_stats: list[dict[str, Any]]
    outcome_stats: list[dict[str, Any]]
    top_playbooks: list[dict[str, Any]]
    lifecycle_area_breakdown: list[dict[str, Any]]
    ai: Ai | None = None      # extension: decisions and model use (docs/ai.md)


@api.route("GET", "/api/analytics", access="read", query=AnalyticsQuery, response=AnalyticsReport,
           summary="KPIs, ROI and distributions for 7, 30 or 90 days (test data excluded)")
def get_analytics(call: Call):
    return service.report(call.session, range_=call.query.range, now=call.now)
