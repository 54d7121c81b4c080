"""The console: pages for the people who review, approve and watch, served at /console by
the same daemon (docs/console.md). Pages read through the API's endpoint handlers or
the services the API calls, and every form acts through an API endpoint declaration
(`gateway`), so the console has no rule of its own about who may do what."""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Response, redirect, render_template, url_for

from . import analytics, customers, interventions, playbooks, settings, shell, signin, webhooks

ROOT = Path(__file__).resolve().parent.parent


def blueprint() -> Blueprint:
    bp = Blueprint("console", __name__, url_prefix="/console", template_folder=str(ROOT / "templates"),
                   static_folder=str(ROOT / "static" / "console"), static_url_path="/static")
    bp.add_url_rule("/", "home", lambda: redirect(url_for("console.review")))
    for module in (shell, signin, interventions, customers, playbooks, analytics, webhooks, settings):
        module.install(bp)
    bp.register_error_handler(404, _not_found)
    bp.after_request(_headers)
    return bp


def _headers(resp: Response) -> Response:
    """No console page in a frame (clickjacking), none kept in a shared cache (a secret is
    shown once), and no sign-in token leaving in a Referer."""
    resp.headers.setdefault("X-Frame-Options", "DENY")
    resp.headers.setdefault("Content-Security-Policy", "frame-ancestors 'none'")
    resp.headers.setdefault("Referrer-Policy", "same-origin")
    if resp.mimetype == "text/html":
        resp.headers.setdefault("Cache-Control", "no-store")
    return resp


def _not_found(_exc) -> Response:
    return Response(render_template("console/message.html", status=404, message="There is nothing here."),
                    status=404, mimetype="text/html")
