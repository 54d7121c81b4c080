"""GET /metrics: the Prometheus text format, for a scraper holding CS_METRICS_TOKEN as its
bearer token; without that setting metrics are off and the path answers 404 like any
unknown one (docs/operations.md, "Metrics")."""

from __future__ import annotations

import hmac
import json

from flask import Flask, Response, current_app

from cs_daemon import metrics, metrics_scrape

from .api import bearer_token


def install(app: Flask) -> None:
    app.add_url_rule("/metrics", "metrics", scrape, methods=["GET"])


def scrape() -> Response:
    rt = current_app.extensions["cs"]
    wanted = rt.settings.cs_metrics_token
    if not wanted:
        return _json({"error": "no such endpoint", "code": "not_found"}, 404)
    given = bearer_token() or ""
    if not hmac.compare_digest(given.encode(), wanted.encode()):
        resp = _json({"error": "missing or wrong metrics token (CS_METRICS_TOKEN)", "code": "unauthorized"}, 401)
        resp.headers["WWW-Authenticate"] = "Bearer"    # as docs/operations.md gives it
        return resp
    return Response(metrics_scrape.exposition(rt), status=200, content_type=metrics.CONTENT_TYPE)


def _json(body: dict, status: int) -> Response:
    return Response(json.dumps(body), status=status, mimetype="application/json")
