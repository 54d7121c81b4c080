"""Playbooks: the list with status, success rate and (where the daemon computes it)
uplift with its interval; the editor, whose JSON fields are checked by the API, with a
live count of the users its entry conditions match and a dry run for one user; and the
status changes."""

from __future__ import annotations

import json

from flask import Blueprint, abort, request, url_for

from cs_daemon.errors import ServiceError, ValidationFailed

from . import web

PB = "/api/playbooks/{playbook_id}"
JSON_FIELDS = ("entry_conditions", "exit_conditions", "constraints", "strategy_hints")
STATUSES = (("active", "Activate"), ("paused", "Pause"), ("archived", "Archive"), ("draft", "Back to draft"))


def install(bp: Blueprint) -> None:
    bp.add_url_rule("/playbooks", "playbooks", web.page(listing))
    bp.add_url_rule("/playbooks", "playbook_create", web.action(create), methods=["POST"])
    bp.add_url_rule("/playbooks/preview-count", "playbook_preview", web.action(preview), methods=["POST"])
    bp.add_url_rule("/playbooks/dry-run", "playbook_dry_run", web.action(dry_run), methods=["POST"])
    bp.add_url_rule("/playbooks/<playbook_id>", "playbook", web.page(editor))
    bp.add_url_rule("/playbooks/<playbook_id>", "playbook_save", web.action(save), methods=["POST"])
    bp.add_url_rule("/playbooks/<playbook_id>/status", "playbook_status", web.action(set_status), methods=["POST"])


def _all(ctx: web.Ctx) -> list[dict]:
    found = ctx.api("GET", "/api/playbooks")["playbooks"]
    view = ctx.test_filter
    return [p for p in found if view is None or p.get("test", False) == view]


def listing(ctx: web.Ctx):
    playbooks = _all(ctx)
    return ctx.render("console/playbooks.html", playbooks=playbooks,
                      uplift=any("uplift" in p for p in playbooks), can_create=ctx.can("POST", "/api/playbooks"))


def create(ctx: web.Ctx):
    made = ctx.api("POST", "/api/playbooks", body={"name": request.form.get("name", "")})
    return web.back(url_for("console.playbook", playbook_id=made["id"]), done="created")


def _one(ctx: web.Ctx, playbook_id: str) -> dict:
    for p in ctx.api("GET", "/api/playbooks")["playbooks"]:
        if p["id"] == playbook_id:
            return p
    abort(404)


def editor(ctx: web.Ctx, playbook_id: str, *, form: dict | None = None, error: dict | None = None, status: int = 200):
    playbook = _one(ctx, playbook_id)
    values = form or {name: json.dumps(playbook[name] or {}, indent=2) for name in JSON_FIELDS}
    values.setdefault("name", playbook["name"])
    values.setdefault("lifecycle_area", playbook["lifecycle_area"] or "")
    return ctx.render("console/playbook.html", status=status, playbook=playbook, values=values, error=error,
                      can_edit=ctx.may_change(playbook.get("test", False), "PUT", PB),
                      can_status=ctx.may_change(playbook.get("test", False), "PUT", PB + "/status"),
                      can_preview=ctx.can("POST", "/api/playbooks/preview-count"),
                      can_dry_run=ctx.can("POST", "/api/interventions/dry-run"), statuses=STATUSES,
                      count=_count_text(ctx, values["entry_conditions"]))


def _count(ctx: web.Ctx, tree) -> dict:
    """The preview count, or the API's refusal of the tree."""
    if not ctx.can("POST", "/api/playbooks/preview-count"):
        return {}
    try:
        return {"matching_users": ctx.api("POST", "/api/playbooks/preview-count",
                                          body={"entry_conditions": tree})["matching_users"]}
    except ServiceError as exc:
        return {"error": exc.body()}


def _parsed(form) -> dict:
    """The editor's fields as a PUT body: JSON text parsed, or 400 naming the field."""
    body: dict = {"name": form.get("name", ""), "lifecycle_area": form.get("lifecycle_area") or None}
    for name in JSON_FIELDS:
        text = form.get(name, "").strip() or "{}"
        try:
            body[name] = json.loads(text)
        except ValueError as exc:
            raise ValidationFailed(f"{name} is not valid JSON: {exc}", [{"field": name, "message": f"not valid JSON: {exc}"}]) from None
    return body


def save(ctx: web.Ctx, playbook_id: str):
    try:
        ctx.api("PUT", PB, body=_parsed(request.form), playbook_id=playbook_id)
    except ServiceError as exc:
        if exc.status != 400:
            raise
        ctx.session.rollback()
        return editor(ctx, playbook_id, form=request.form.to_dict(), error=exc.body(), status=400)
    return web.back(url_for("console.playbook", playbook_id=playbook_id), done="saved")


def set_status(ctx: web.Ctx, playbook_id: str):
    ctx.api("PUT", PB + "/status", body={"status": request.form.get("status", "")}, playbook_id=playbook_id)
    return web.back(url_for("console.playbook", playbook_id=playbook_id), done="status")


def preview(ctx: web.Ctx):
    """The live count under the editor: the entry conditions as typed, counted by the API."""
    return ctx.render("console/_count.html", count=_count_text(ctx, request.form.get("entry_conditions", "")))


def _count_text(ctx: web.Ctx, text: str) -> dict:
    try:
        tree = json.loads(text.strip() or "{}")
    except ValueError as exc:
        return {"error": {"error": f"entry_conditions is not valid JSON: {exc}", "code": "validation_failed",
                          "details": []}}
    return _count(ctx, tree)


def dry_run(ctx: web.Ctx):
    """What the engine would decide now for the user typed in, and this playbook's verdict."""
    result = ctx.api("POST", "/api/interventions/dry-run", body={"user_id": request.form.get("user_id", "")})
    return ctx.render("console/_dry_run.html" if web.is_htmx() else "console/dry_run.html", result=result, playbook_id=request.form.get("playbook_id"))
