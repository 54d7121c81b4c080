"""Customers: search and filters with health, risk and next action; a customer's detail
with the health and engagement chart over time, events, interventions, milestone
progress, and what the engine would decide now (the dry run)."""

from __future__ import annotations

from datetime import timedelta

from flask import Blueprint, request, url_for

from cs_daemon.customers import search, snapshots
from cs_daemon.engine.scoring import RISK_LEVELS, STAGES
from cs_daemon.interventions import by_user

from . import charts, web

CUSTOMER = "/api/customers/{user_id}"
DRY_RUN = ("POST", "/api/interventions/dry-run")
CHART_DAYS = (30, 90)


def install(bp: Blueprint) -> None:
    bp.add_url_rule("/customers", "customers", web.page(listing))
    bp.add_url_rule("/customers/<path:user_id>/dry-run", "customer_dry_run", web.action(dry_run), methods=["POST"])
    bp.add_url_rule("/customers/<path:user_id>", "customer", web.page(detail))


def listing(ctx: web.Ctx):
    args = {k: (request.args.get(k) or "").strip() or None for k in ("q", "stage", "risk", "trait", "value")}
    tree = search.filters(stage=args["stage"], risk=args["risk"], trait=args["trait"], trait_value=args["value"])
    page = search.find(ctx.session, now=ctx.now, q=args["q"], tree=tree, test=ctx.test_filter,
                       cursor=request.args.get("cursor"))
    upcoming = by_user.next_actions(ctx.session, ctx.caller.tenant_id, [c.id for c in page.customers])
    older = page.next_cursor and url_for("console.customers", cursor=page.next_cursor,
                                         **{k: v for k, v in args.items() if v})
    return ctx.render("console/customers.html", customers=page.customers, upcoming=upcoming,
                      args=args, older=older, stages=STAGES, risks=RISK_LEVELS,
                      totals=ctx.api("GET", "/api/customers/stats")["stats"])


def detail(ctx: web.Ctx, user_id: str):
    found = ctx.api("GET", CUSTOMER, user_id=user_id)
    days = int(request.args.get("days", 90)) if request.args.get("days") in ("30", "90") else 90
    history = snapshots.history(ctx.session, user_id, days=days, now=ctx.now)
    chart = _chart(history, days, ctx.now)
    return ctx.render("console/customer.html", customer=found["customer"], events=found["events"][:50],
                      interventions=found["interventions"], history=history, chart=chart, days=days,
                      chart_days=CHART_DAYS, can_dry_run=ctx.can(*DRY_RUN))


def _chart(history, days: int, now):
    if not history:
        return None
    first = now.date() - timedelta(days=days - 1)
    by_day = {s.day: s for s in history}
    axis = [first + timedelta(days=i) for i in range(days)]
    health = [by_day[d].health if d in by_day else None for d in axis]
    engagement = [by_day[d].engagement_score if d in by_day else None for d in axis]
    return charts.lines(axis, {"Health": health, "Engagement": engagement},
                        label=f"Health and engagement over the last {days} days")


def dry_run(ctx: web.Ctx, user_id: str):
    result = ctx.api(*DRY_RUN, body={"user_id": user_id})
    return ctx.render("console/_dry_run.html" if web.is_htmx() else "console/dry_run.html", result=result, playbook_id=request.form.get("playbook_id"))
