"""Analytics for 7, 30 or 90 days, drawn from the API's own report (test data excluded)."""

from __future__ import annotations

from flask import Blueprint, request

from . import charts, web

RANGES = ("7d", "30d", "90d")
SHOWN = {"range", "kpis", "roi", "lifecycle_distribution", "risk_distribution", "intervention_stats", "outcome_stats",
         "top_playbooks", "lifecycle_area_breakdown"}


def install(bp: Blueprint) -> None:
    bp.add_url_rule("/analytics", "analytics", web.page(page))


def page(ctx: web.Ctx):
    report = ctx.api("GET", "/api/analytics", query={"range": request.args.get("range")})   # a bad one: the API's 400
    range_ = report["range"]
    extras = {k: v for k, v in report.items() if k not in SHOWN and v}   # figures later versions add (AI use, ...)
    return ctx.render("console/analytics.html", report=report, range_=range_, ranges=RANGES, drawn=_charts(report),
                      extras=extras)


def _charts(report: dict) -> dict:
    drawn = {
        "lifecycle": charts.bars([(i["stage"], i["count"]) for i in report["lifecycle_distribution"]],
                                 label="Users by lifecycle stage"),
        "risk": charts.bars([(i["risk_level"], i["count"]) for i in report["risk_distribution"]],
                            label="Users by risk level"),
        "channels": charts.stacked(
            [(i["channel"], [i["delivered"], i["failed"], i["total"] - i["delivered"] - i["failed"]])
             for i in report["intervention_stats"]],
            ["delivered", "failed", "other"], label="Interventions by channel and status"),
        "outcomes": charts.bars([(i["outcome"], i["count"]) for i in report["outcome_stats"]],
                                label="Outcomes of interventions"),
        "playbooks": charts.bars([(i["name"], round((i["success_rate"] or 0) * 100, 1)) for i in report["top_playbooks"]],
                                 label="Success rate of the busiest playbooks", unit="%"),
    }
    uplift = (report.get("roi") or {}).get("uplift")
    if uplift:
        drawn["uplift"] = charts.intervals(
            [(u["name"], u["uplift"], *(u.get("uplift_ci") or (None, None))) for u in uplift if u.get("uplift") is not None],
            label="Uplift per playbook against the held-out users, with 95% intervals")
    return drawn
