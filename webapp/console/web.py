"""What every console page and form shares: the session cookie, the CSRF token, the
unit of work, errors shown as pages, and the `Ctx` a handler gets (docs/console.md).

A page (`page`) runs without a transaction around it, as the API's GETs do; a form
(`action`) runs in one transaction and is refused with 403 before anything else when
its CSRF token is missing or wrong. Without a live session a page redirects to the
sign-in page and a form answers 401."""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from functools import wraps
from typing import Any, Callable
from urllib.parse import urlsplit

from flask import Response, current_app, redirect, render_template, request, url_for

from cs_daemon import logs
from cs_daemon.console import service as console
from cs_daemon.errors import ServiceError
from cs_daemon.uow import uow_of

from . import gateway

COOKIE = "cs_console"
PRE_COOKIE = "cs_console_pre"     # the CSRF token of the sign-in forms, before a session exists
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"


@dataclass
class Ctx:
    rt: Any
    session: Any
    signed: console.Signed

    @property
    def caller(self):
        return self.signed.caller

    @property
    def now(self):
        return self.rt.now()

    @property
    def view(self) -> str:
        return self.signed.row.data_view

    @property
    def test_filter(self) -> bool | None:
        """What the live/test/both switch keeps: False (live only), True (test only), None."""
        return {"live": False, "test": True}.get(self.view)

    def can(self, method: str, path: str) -> bool:
        return gateway.allowed(self.caller, method, path)

    def may_change(self, item_test: bool, method: str, path: str) -> bool:
        """Whether to offer a control on an object: the role allows the endpoint, and a
        test session changes test objects only (docs/api.md, "Test mode")."""
        return self.can(method, path) and (item_test or not self.caller.test)

    def api(self, method: str, path: str, *, body: Any = None, query: dict | None = None, **path_params):
        return gateway.call(self.rt, self.session, self.caller, method, path, body=body, query=query,
                            **path_params)

    def render(self, template: str, status: int = 200, **values) -> Response:
        return Response(render_template(template, ctx=self, **values), status=status, mimetype="text/html")


def runtime():
    return current_app.extensions["cs"]


def is_htmx() -> bool:
    return request.headers.get("HX-Request") == "true"


def secure_cookies(rt) -> bool:
    """Cookies are Secure when the console is reached over https: the request is, or the
    public URL says a proxy in front terminates TLS."""
    return request.is_secure or rt.settings.cs_public_url.startswith("https://")


def set_session_cookie(resp: Response, rt, token: str) -> None:
    resp.set_cookie(COOKIE, token, max_age=int(console.SESSION_MAX.total_seconds()), path="/console",
                    httponly=True, samesite="Lax", secure=secure_cookies(rt))


def clear_session_cookie(resp: Response, rt) -> None:
    resp.delete_cookie(COOKIE, path="/console", httponly=True, samesite="Lax", secure=secure_cookies(rt))


def _signed(rt, session) -> console.Signed | None:
    signed = console.resolve(session, request.cookies.get(COOKIE), now=rt.now())
    if signed is not None:
        uow_of(session).tenant_id = signed.caller.tenant_id
        logs.set_tenant(signed.caller.tenant_id)
    return signed


def page(fn: Callable) -> Callable:
    @wraps(fn)
    def view(**kwargs):
        rt = runtime()
        with rt.session(atomic=False) as session:
            signed = _signed(rt, session)
            if signed is None:
                return redirect(url_for("console.sign_in", next=_here()))
            ctx = Ctx(rt, session, signed)
            try:
                return fn(ctx, **kwargs)
            except ServiceError as exc:
                return error_page(exc, ctx)

    return view


def action(fn: Callable) -> Callable:
    @wraps(fn)
    def view(**kwargs):
        rt = runtime()
        with rt.session() as session:
            signed = _signed(rt, session)
            if signed is None:
                return _plain("Your console session has ended: sign in again.", 401)
            if not _csrf_ok(signed.row.csrf_token):
                return _plain("The form's security token is missing or wrong: reload the page and try again.", 403)
            ctx = Ctx(rt, session, signed)
            try:
                return fn(ctx, **kwargs)
            except ServiceError as exc:
                session.rollback()
                return error_page(exc, ctx)

    return view


def _csrf_ok(expected: str) -> bool:
    sent = request.form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or ""
    return hmac.compare_digest(sent.encode(), expected.encode())


def _here() -> str:
    return request.full_path.rstrip("?")


def _plain(message: str, status: int) -> Response:
    return Response(render_template("console/message.html", message=message, status=status), status=status,
                    mimetype="text/html")


def error_page(exc: ServiceError, ctx: Ctx) -> Response:
    """The API's refusal, shown: a fragment for an htmx request (swapped where the result
    would go), else a page. The status is the API's."""
    body = exc.body()
    template = "console/_error.html" if is_htmx() else "console/error.html"
    return ctx.render(template, status=exc.status, error=body)


def back(default: str, **notice) -> Response:
    """303 to the form's `next` (a console path only), else to `default`."""
    target = request.form.get("next") or default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith("/console"):
        target = default
    if notice.get("done"):
        target += ("&" if "?" in target else "?") + "done=" + notice["done"]
    return redirect(target, code=303)


# --- the sign-in forms' CSRF token (no session yet): a double-submit cookie ------------

def pre_token() -> str:
    return request.cookies.get(PRE_COOKIE) or secrets.token_urlsafe(24)


def with_pre_cookie(resp: Response, token: str, rt) -> Response:
    resp.set_cookie(PRE_COOKIE, token, path="/console", httponly=True, samesite="Strict",
                    secure=secure_cookies(rt))
    return resp


def pre_token_ok() -> bool:
    cookie = request.cookies.get(PRE_COOKIE) or ""
    sent = request.form.get(CSRF_FIELD) or ""
    return bool(cookie) and hmac.compare_digest(cookie.encode(), sent.encode())
