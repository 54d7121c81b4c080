"""Signing in and out (docs/console.md, "Signing in"): an emailed one-time link for a team
member, or an API key pasted once. The link in the mail opens a page whose button
signs in (a mail scanner that follows links spends nothing)."""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import Blueprint, Response, redirect, render_template, request, url_for

from cs_daemon import addresses
from cs_daemon.auth.admission import admit_address
from cs_daemon.console import mail, service as console
from cs_daemon.errors import ServiceError

from . import web

MAX_EMAIL = 320


def install(bp: Blueprint) -> None:
    bp.add_url_rule("/sign-in", "sign_in", sign_in_page, methods=["GET"])
    bp.add_url_rule("/sign-in/email", "sign_in_email", sign_in_email, methods=["POST"])
    bp.add_url_rule("/sign-in/key", "sign_in_key", sign_in_key, methods=["POST"])
    bp.add_url_rule("/auth", "auth_page", auth_page, methods=["GET"])
    bp.add_url_rule("/auth", "auth_use", auth_use, methods=["POST"])
    bp.add_url_rule("/sign-out", "sign_out", web.action(sign_out), methods=["POST"])


def _next() -> str:
    target = request.values.get("next") or ""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith("/console") or parts.path.startswith("/console/sign"):
        return url_for("console.review")
    return target


def _render(template: str, status: int = 200, **values) -> Response:
    rt = web.runtime()
    token = web.pre_token()
    resp = Response(render_template(template, csrf=token, next=_next(), mail=bool(rt.settings.smtp_url), **values),
                    status=status, mimetype="text/html")
    return web.with_pre_cookie(resp, token, rt)


def sign_in_page():
    rt = web.runtime()
    with rt.session(atomic=False) as session:
        if console.resolve(session, request.cookies.get(web.COOKIE), now=rt.now()) is not None:
            return redirect(_next())
    return _render("console/sign_in.html")


def _refused() -> Response | None:
    """The answer to a sign-in form that expired or comes once too often, else None."""
    if not web.pre_token_ok():
        return _render("console/sign_in.html", 403, error="The form expired: try again.")
    return _limited()


def _limited() -> Response | None:
    """Sign-in forms count against the per-address limit of the keyless endpoints."""
    rt = web.runtime()
    address = addresses.client(request.remote_addr, request.headers.get("X-Forwarded-For"),
                               rt.settings.cs_trusted_proxies)
    verdict = admit_address(rt.cache, f"POST{request.path}", address, rt.settings.cs_address_rate_limit, rt.now())
    if verdict.allowed:
        return None
    resp = _render("console/sign_in.html", 429,
                   error=f"Too many sign-in attempts from your address: try again in {verdict.retry_after} s.")
    resp.headers["Retry-After"] = str(verdict.retry_after)
    return resp


def sign_in_email():
    refused = _refused()
    if refused:
        return refused
    rt = web.runtime()
    email = (request.form.get("email") or "").strip()
    if not email or "@" not in email or len(email) > MAX_EMAIL:
        return _render("console/sign_in.html", 400, error="Enter the email address you are a team member with.",
                       email=email)
    if not rt.settings.smtp_url:
        return _render("console/sign_in.html", 503, email=email,
                       error="This server sends no email (SMTP_URL is not set): sign in with an API key.")
    with rt.session() as session:
        for made in console.request_links(session, email, now=rt.now()):
            mail.queue(session, made, settings=rt.settings, now=rt.now())
    return _render("console/sign_in.html", sent=email)


def sign_in_key():
    refused = _refused()
    if refused:
        return refused
    rt = web.runtime()
    try:
        with rt.session() as session:
            started = console.start_with_key(session, request.form.get("api_key") or "", now=rt.now())
    except ServiceError as exc:
        return _render("console/sign_in.html", exc.status, error=f"Not signed in: {exc.message}.")
    resp = redirect(_next(), code=303)
    web.set_session_cookie(resp, rt, started.token)
    return resp


def auth_page():
    return _render("console/auth.html", token=request.args.get("token") or "")


def auth_use():
    if not web.pre_token_ok():
        return _render("console/auth.html", 403, token=request.form.get("token") or "",
                       error="The form expired: open the link from your email again.")
    rt = web.runtime()
    try:
        with rt.session() as session:
            member = console.use_link(session, request.form.get("token") or "", now=rt.now())
            started = console.start(session, member.tenant_id, member_id=member.id, now=rt.now())
    except ServiceError as exc:
        return _render("console/auth.html", exc.status, error=exc.message)
    resp = redirect(url_for("console.review"), code=303)
    web.set_session_cookie(resp, rt, started.token)
    return resp


def sign_out(ctx: web.Ctx):
    console.end(ctx.session, ctx.signed.row.id, now=ctx.now)
    resp = redirect(url_for("console.sign_in"), code=303)
    web.clear_session_cookie(resp, ctx.rt)
    return resp
