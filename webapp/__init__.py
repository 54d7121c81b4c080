"""The HTTP front door: `create_app(settings)` builds the Flask app serving /api."""

from __future__ import annotations

import json
import logging

from flask import Flask, Response, g, request
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm.exc import StaleDataError
from werkzeug.exceptions import ClientDisconnected, HTTPException, RequestEntityTooLarge

from cs_daemon.clock import Clock
from cs_daemon.config import Settings, load_settings
from cs_daemon import db
from cs_daemon.errors import Conflict, DatabaseUnavailable, ServiceError
from cs_daemon.runtime import Runtime
from cs_daemon.wiring import bootstrap, wire

from . import browser, console, metrics_route, requests_log, stream_handoff
from .api import add_missing_headers, error_response
from .client_reads import ClientTooSlow
from .endpoints import all_apis

log = logging.getLogger("webapp")
MAX_BODY = 1024 * 1024
RETRY_AFTER_OUTAGE = 5    # seconds a client waits before trying again while the database is away

# every code is one of the closed list of docs/api.md, "Errors": a method a route does not
# take is a route not found; a request too slow or too large in its head, one that fails
HTTP_CODES = {400: "validation_failed", 401: "unauthorized", 403: "forbidden", 404: "not_found",
              405: "not_found", 408: "validation_failed", 413: "payload_too_large", 414: "validation_failed",
              429: "rate_limited", 431: "validation_failed"}


def create_app(settings: Settings | None = None, *, clock: Clock | None = None,
               runtime: Runtime | None = None) -> Flask:
    wire()
    rt = runtime or bootstrap(settings or load_settings(), clock)
    app = Flask(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.json.sort_keys = False
    app.extensions["cs"] = rt
    app.extensions["cs_apis"] = apis = all_apis()
    requests_log.install(app)
    app.before_request(_refuse_large_bodies)
    for api in apis:
        app.register_blueprint(api.blueprint())
    _install_error_handlers(app)
    browser.install(app)
    metrics_route.install(app)
    app.register_blueprint(console.blueprint())

    @app.after_request
    def _rate_headers(resp: Response) -> Response:
        add_missing_headers(resp, g.get("rate_headers") or {})
        return resp

    app.wsgi_app = stream_handoff.StreamHandoff(app.wsgi_app)    # in-app streams go to the event loop
    return app


def _refuse_large_bodies() -> None:
    """413 for a body over MAX_BODY, whether the route reads one or not (docs/api.md,
    "Errors"). A body sent in chunks has no length ahead: it is read here, and werkzeug's
    bound on its reading stops at MAX_BODY bytes without saying more were sent, so a
    chunked body that reaches MAX_BODY is refused rather than cut and acted on."""
    length = request.content_length
    if length is not None:
        if length > MAX_BODY:
            raise RequestEntityTooLarge()
    elif "chunked" in request.headers.get("Transfer-Encoding", "").lower():
        if len(request.get_data(cache=True)) >= MAX_BODY:
            raise RequestEntityTooLarge()


def _install_error_handlers(app: Flask) -> None:
    @app.errorhandler(ServiceError)
    def _service_error(exc: ServiceError):
        return error_response(exc)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        status = exc.code or 500
        code = HTTP_CODES.get(status, "internal" if status >= 500 else "validation_failed")
        message = {404: "no such endpoint", 405: "method not allowed on this endpoint",
                   413: f"request body larger than {MAX_BODY} bytes"}.get(status, exc.description)
        resp = Response(json.dumps({"error": message, "code": code}), status=status,
                        mimetype="application/json")
        if status == 405 and exc.valid_methods:  # type: ignore[attr-defined]
            resp.headers["Allow"] = ", ".join(exc.valid_methods)  # type: ignore[attr-defined]
        return resp

    @app.errorhandler(ClientDisconnected)
    def _body_cut_off(exc: ClientDisconnected):
        # werkzeug's reading of the body raises this while handling the error it met: the
        # bound on a client's silence (docs/deploy.md, "Slow clients") in production
        # (ClientTooSlow) or in the embedded server (the socket's own timeout)
        if not isinstance(exc.__context__, (ClientTooSlow, TimeoutError)):
            return _http_error(exc)
        why = f"the client sent nothing for {app.extensions['cs'].settings.cs_client_timeout_seconds:g} s"
        log.info("%s %s: the request body stopped arriving (%s)", request.method, request.path, why)
        return Response(json.dumps({"error": f"the request body did not arrive in time: {why}",
                                    "code": HTTP_CODES[408]}), status=408, mimetype="application/json")

    @app.errorhandler(StaleDataError)
    def _changed_meanwhile(exc: StaleDataError):
        # a row with a revision (a playbook) was updated by another request first
        return error_response(Conflict("it was changed by another request meanwhile; read it again and retry"))

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        # once, with its traceback; the line names the request id the response carries
        log.exception("unhandled error answering %s %s", request.method, request.path)
        return Response(json.dumps({"error": "internal server error", "code": "internal"}),
                        status=500, mimetype="application/json")

    @app.errorhandler(DBAPIError)
    def _database_error(exc: DBAPIError):
        if not db.unreachable(exc):
            return _unexpected(exc)
        # an outage, not a bug: one line, and the client is told to come back
        log.warning("database unreachable: %s", str(exc.orig).splitlines()[0] if exc.orig else exc)
        resp = error_response(DatabaseUnavailable("the database cannot be reached for the moment; retry shortly"))
        resp.headers["Retry-After"] = str(RETRY_AFTER_OUTAGE)
        return resp
