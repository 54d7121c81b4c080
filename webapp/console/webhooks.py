"""Webhooks: the endpoints, each one's delivery log with every attempt and replay, the
test send; and the external actions with their dispatches (docs/webhooks.md)."""

from __future__ import annotations

from flask import Blueprint, request, url_for

from cs_daemon.errors import ServiceError
from cs_daemon.interventions import search

from . import web

EP = "/api/webhooks/endpoints/{endpoint_id}"
LOG_LIMIT = 50


def install(bp: Blueprint) -> None:
    bp.add_url_rule("/webhooks", "webhooks", web.page(page))
    bp.add_url_rule("/webhooks/endpoints", "endpoint_create", web.action(create), methods=["POST"])
    bp.add_url_rule("/webhooks/endpoints/<endpoint_id>/test", "endpoint_test", web.action(send_test), methods=["POST"])
    bp.add_url_rule("/webhooks/endpoints/<endpoint_id>/delete", "endpoint_delete", web.action(delete), methods=["POST"])
    bp.add_url_rule("/webhooks/deliveries/<delivery_id>/replay", "delivery_replay", web.action(replay),
                    methods=["POST"])


def page(ctx: web.Ctx, *, made: dict | None = None, tested: dict | None = None):
    endpoints = ctx.api("GET", "/api/webhooks/endpoints")["endpoints"]
    chosen = request.args.get("ep") or (endpoints[0]["id"] if endpoints else None)
    deliveries = []
    if chosen:
        try:
            deliveries = ctx.api("GET", EP + "/deliveries", query={"limit": LOG_LIMIT}, endpoint_id=chosen)["deliveries"]
        except ServiceError:
            chosen, deliveries = None, []
    view = ctx.test_filter
    deliveries = [d for d in deliveries if view is None or d["test"] == view]
    actions = [a for a in ctx.api("GET", "/api/external/actions", query={"limit": 25})["actions"]
               if view is None or a["test"] == view]
    dispatches = {a["id"]: search.deliveries_of(ctx.session, a["id"]) for a in actions}
    types = ctx.api("GET", "/api/external/action-types")["action_types"]
    return ctx.render("console/webhooks.html", endpoints=endpoints, chosen=chosen, deliveries=deliveries,
                      actions=actions, dispatches=dispatches, types=types, made=made, tested=tested,
                      can_create=ctx.can("POST", "/api/webhooks/endpoints") and not ctx.caller.test,
                      can_change=ctx.can("DELETE", EP) and not ctx.caller.test,
                      can_replay=ctx.can("POST", "/api/webhooks/deliveries/{delivery_id}/replay"))


def create(ctx: web.Ctx):
    events = [e.strip() for e in request.form.get("events", "").split(",") if e.strip()] or None
    made = ctx.api("POST", "/api/webhooks/endpoints", body={"url": request.form.get("url", ""),
                                                            "description": request.form.get("description") or None,
                                                            "events": events})["endpoint"]
    return page(ctx, made=made)     # the secret is shown once, on this answer only


def send_test(ctx: web.Ctx, endpoint_id: str):
    result = ctx.api("POST", EP + "/test", endpoint_id=endpoint_id)["test"]
    return page(ctx, tested=result)


def delete(ctx: web.Ctx, endpoint_id: str):
    ctx.api("DELETE", EP, endpoint_id=endpoint_id)
    return web.back(url_for("console.webhooks"), done="deleted")


def replay(ctx: web.Ctx, delivery_id: str):
    done = ctx.api("POST", "/api/webhooks/deliveries/{delivery_id}/replay", delivery_id=delivery_id)["delivery"]
    return web.back(url_for("console.webhooks", ep=done.get("endpoint_id") or ""), done="replayed")
