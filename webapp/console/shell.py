"""What every page's frame needs: display filters, the navigation, and the switch between
live data, test data or both."""

from __future__ import annotations

import json
from datetime import datetime

from flask import Blueprint, request
from markupsafe import Markup, escape

from cs_daemon.console import service as console

from . import web

NAV = (("review", "Review"), ("interventions", "Interventions"), ("customers", "Customers"),
       ("playbooks", "Playbooks"), ("analytics", "Analytics"), ("webhooks", "Webhooks"), ("settings", "Settings"))
DONE = {  # notices after a form without script, by a fixed key (never text from the URL)
    "approve": "Approved.", "pause": "Paused.", "reject": "Rejected.", "flag": "Flagged.", "rollback": "Rolled back.",
    "message": "Message saved.", "handle": "Escalation handled.", "delegate": "Escalation delegated.",
    "saved": "Saved.", "status": "Status changed.", "created": "Created.", "deleted": "Deleted.",
    "replayed": "Replay attempted.", "tested": "Test event sent.", "revoked": "Revoked.", "invited": "Invitation sent.",
    "role": "Role changed.", "removed": "Removed.", "view": "View changed.",
}


def install(bp: Blueprint) -> None:
    bp.add_url_rule("/view", "set_view", web.action(set_view), methods=["POST"])
    bp.add_app_template_filter(when, "when")
    bp.add_app_template_filter(pct, "pct")
    bp.add_app_template_filter(pretty_json, "pretty_json")
    bp.add_app_template_global(NAV, "console_nav")
    bp.add_app_template_global(csrf_field, "csrf_field")
    bp.add_app_template_global(notice, "console_notice")
    bp.add_app_template_global(test_badge, "test_badge")


def set_view(ctx: web.Ctx):
    console.set_data_view(ctx.session, ctx.signed.row.id, request.form.get("view") or "")
    return web.back("/console/review", done="view")


def when(value) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.strftime("%Y-%m-%d %H:%M")


def pct(value) -> str:
    return "—" if value is None else f"{value:.0%}"


def pretty_json(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def csrf_field(ctx) -> Markup:
    return Markup(f'<input type="hidden" name="{web.CSRF_FIELD}" value="{escape(ctx.signed.row.csrf_token)}">')


def notice() -> str | None:
    return DONE.get(request.args.get("done", ""))


def test_badge(item) -> Markup:
    test = item.get("test") if isinstance(item, dict) else getattr(item, "test", False)
    return Markup('<span class="badge badge-test" title="test-mode data">test</span>') if test else Markup("")
