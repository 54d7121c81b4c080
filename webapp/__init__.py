"""The HTTP front door: `create_app(settings)` builds the Flask app serving /api."""

from __future__ import annotations

import json
import logging

from flask import Flask, Response, g, request
from sqlalchemy.orm.exc import StaleDataError
from werkzeug.exceptions import HTTPException

from cs_daemon.clock import Clock
from cs_daemon.config import Settings, load_settings
from cs_daemon.errors import Conflict, ServiceError
from cs_daemon.runtime import Runtime

from . import browser, console, metrics_route, requests_log
from .api import Api, error_response

log = logging.getLogger("webapp")
MAX_BODY = 1024 * 1024

_HTTP_CODES = {400: "validation_failed", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 413: "payload_too_large", 429: "rate_limited"}


def all_apis() -> list[Api]:
    from .routes import (analytics, connectors, customers, decisions, external, interventions, playbooks, settings,
                         system, team, webhooks)
    from .routes import unsubscribe
    from .routes import in_app
    from .routes import billing
    from .routes import partner

    return [system.api, settings.api, customers.api, connectors.api, webhooks.api, playbooks.api,
            decisions.api, interventions.api, external.api, team.api, analytics.api, unsubscribe.api, in_app.api, billing.api,
            partner.api]


def create_app(settings: Settings | None = None, *, clock: Clock | None = None,
               runtime: Runtime | None = None) -> Flask:
    rt = runtime or Runtime(settings or load_settings(), clock)
    app = Flask(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.json.sort_keys = False
    app.extensions["cs"] = rt
    requests_log.install(app)
    for api in all_apis():
        app.register_blueprint(api.blueprint())
    _install_error_handlers(app)
    browser.install(app)
    metrics_route.install(app)
    app.register_blueprint(console.blueprint())

    @app.after_request
    def _rate_headers(resp: Response) -> Response:
        for name, value in getattr(g, "rate_headers", {}).items():
            resp.headers.setdefault(name, value)
        return resp

    return app


def _install_error_handlers(app: Flask) -> None:
    @app.errorhandler(ServiceError)
    def _service_error(exc: ServiceError):
        return error_response(exc)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        status = exc.code or 500
        code = _HTTP_CODES.get(status, "internal" if status >= 500 else "validation_failed")
        message = {404: "no such endpoint", 405: "method not allowed on this endpoint",
                   413: f"request body larger than {MAX_BODY} bytes"}.get(status, exc.description)
        resp = Response(json.dumps({"error": message, "code": code}), status=status,
                        mimetype="application/json")
        if status == 405 and exc.valid_methods:  # type: ignore[attr-defined]
            resp.headers["Allow"] = ", ".join(exc.valid_methods)  # type: ignore[attr-defined]
        return resp

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
