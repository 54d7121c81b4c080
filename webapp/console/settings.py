"""Settings: the kill switch and shadow mode (with the time it has left), the approval
mode, the brand context, API keys (the secret shown once) and the team with its
invitations. Each form is the API endpoint of the same name."""

from __future__ import annotations

from datetime import datetime

from flask import Blueprint, request, url_for

from cs_daemon.auth.access import PERMISSIONS
from cs_daemon.tenants import service as tenants

from . import web

APPROVAL_MODES = ("suggest_only", "semi_auto", "full_auto")
ROLES = ("viewer", "editor", "admin")
BRAND_LISTS = ("things_to_mention", "things_to_avoid")
KEY = "/api/settings/api-keys/{key_id}"
MEMBER = "/api/team/members/{member_id}"


def install(bp: Blueprint) -> None:
    bp.add_url_rule("/settings", "settings", web.page(page))
    for name, fn in (("kill-switch", kill_switch), ("shadow-mode", shadow_mode), ("approval-mode", approval_mode),
                     ("brand", brand), ("api-keys", issue_key), ("invite", invite)):
        bp.add_url_rule(f"/settings/{name}", f"settings_{name.replace('-', '_')}", web.action(fn), methods=["POST"])
    bp.add_url_rule("/settings/api-keys/<key_id>/revoke", "settings_revoke_key", web.action(revoke_key),
                    methods=["POST"])
    bp.add_url_rule("/settings/members/<member_id>/role", "settings_member_role", web.action(member_role),
                    methods=["POST"])
    bp.add_url_rule("/settings/members/<member_id>/remove", "settings_member_remove", web.action(member_remove),
                    methods=["POST"])
    bp.add_url_rule("/settings/invitations/<invitation_id>/revoke", "settings_revoke_invitation",
                    web.action(revoke_invitation), methods=["POST"])


def page(ctx: web.Ctx, *, issued: dict | None = None, invited: dict | None = None):
    found = ctx.api("GET", "/api/settings")
    tenant = found["tenant"]
    typed = tenants.config_of(tenants.get(ctx.session, ctx.caller.tenant_id, now=ctx.now))
    expires = typed.shadow_mode_expires if tenant["shadow_mode"] else None
    return ctx.render(
        "console/settings.html", tenant=tenant, brand=found["brand_context"] or {}, keys=found["api_keys"],
        members=ctx.api("GET", "/api/team/members")["members"],
        invitations=ctx.api("GET", "/api/team/invitations")["invitations"],
        approval_mode=typed.approval_mode, approval_modes=APPROVAL_MODES, shadow_left=_left(expires, ctx.now),
        roles=ROLES, permissions=PERMISSIONS, issued=issued, invited=invited,
        can={"admin": ctx.can("PUT", "/api/settings/kill-switch") and not ctx.caller.test,
             "configure": ctx.can("PATCH", "/api/settings") and not ctx.caller.test,
             "issue_keys": ctx.can("POST", "/api/settings/api-keys"),  # not "keys": a dict's method in Jinja
             "team": ctx.can("POST", "/api/team/invite") and not ctx.caller.test})


def _left(expires: datetime | None, now: datetime) -> str | None:
    if expires is None:
        return None
    minutes = max(0, int((expires - now).total_seconds() // 60))
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _flag(ctx: web.Ctx, path: str):
    ctx.api("PUT", path, body={"active": request.form.get("active") == "true"})
    return web.back(url_for("console.settings"), done="saved")


def kill_switch(ctx: web.Ctx):
    return _flag(ctx, "/api/settings/kill-switch")


def shadow_mode(ctx: web.Ctx):
    return _flag(ctx, "/api/settings/shadow-mode")


def approval_mode(ctx: web.Ctx):
    ctx.api("PATCH", "/api/settings", body={"approvalMode": request.form.get("approval_mode", "")})
    return web.back(url_for("console.settings"), done="saved")


def brand(ctx: web.Ctx):
    body = {name: request.form.get(name, "").strip() or None for name in ("product_description", "tone_guidelines")}
    for name in BRAND_LISTS:
        body[name] = [line.strip() for line in request.form.get(name, "").splitlines() if line.strip()]
    ctx.api("PATCH", "/api/settings/brand", body=body)
    return web.back(url_for("console.settings"), done="saved")


def issue_key(ctx: web.Ctx):
    issued = ctx.api("POST", "/api/settings/api-keys", body={
        "label": request.form.get("label") or None, "role": request.form.get("role", ""),
        "permissions": request.form.getlist("permissions"), "test": request.form.get("test") == "true"})
    return page(ctx, issued=issued)      # the secret is shown once, on this answer only


def revoke_key(ctx: web.Ctx, key_id: str):
    ctx.api("DELETE", KEY, key_id=key_id)
    return web.back(url_for("console.settings"), done="revoked")


def invite(ctx: web.Ctx):
    made = ctx.api("POST", "/api/team/invite", body={"email": request.form.get("email", ""),
                                                     "role": request.form.get("role", "")})
    return page(ctx, invited=made["invitation"])


def member_role(ctx: web.Ctx, member_id: str):
    ctx.api("PUT", MEMBER + "/role", body={"role": request.form.get("role", "")}, member_id=member_id)
    return web.back(url_for("console.settings"), done="role")


def member_remove(ctx: web.Ctx, member_id: str):
    ctx.api("DELETE", MEMBER, member_id=member_id)
    return web.back(url_for("console.settings"), done="removed")


def revoke_invitation(ctx: web.Ctx, invitation_id: str):
    ctx.api("DELETE", "/api/team/invitations/{invitation_id}", invitation_id=invitation_id)
    return web.back(url_for("console.settings"), done="revoked")
