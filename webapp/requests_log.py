"""Each request's id and its access-log line: the id is the client's `X-Request-Id` when
that is 1..128 visible ASCII characters, else a new one; every response carries it, and
every log line written while the request runs names it (and its tenant, once a key or
token named one). docs/operations.md, "Logs"."""

from __future__ import annotations

import logging
import re
import time

from flask import Flask, Response, g, request

from cs_daemon import logs, metrics

HEADER = "X-Request-Id"
_CONVERTER = re.compile(r"<\w+:")   # `<path:user_id>` is labelled `<user_id>`
access = logging.getLogger("webapp.access")


def _count(status: int, seconds: float) -> None:
    """Requests by their URL rule (not the raw path: ids would make a series each)."""
    route = _CONVERTER.sub("<", request.url_rule.rule) if request.url_rule is not None else "unmatched"
    try:
        metrics.REQUESTS.labels(method=request.method, route=route, status=str(status)).inc()
        metrics.LATENCY.labels(method=request.method, route=route).observe(seconds)
    except Exception as exc:   # a metric never fails the request
        access.debug("request not counted: %s", exc)


def install(app: Flask) -> None:
    @app.before_request
    def _begin() -> None:
        rid = logs.sane_request_id(request.headers.get(HEADER)) or logs.new_request_id()
        g.request_tokens = (logs._request_id.set(rid), logs._tenant_id.set(None))
        g.request_started = time.perf_counter()

    @app.after_request
    def _stamp(resp: Response) -> Response:
        rid = logs.request_id()
        if rid:
            resp.headers[HEADER] = rid
        started = g.get("request_started")
        if started is not None:
            seconds = time.perf_counter() - started
            access.info("%s %s %s %.1f ms", request.method, request.path, resp.status_code, seconds * 1000)
            _count(resp.status_code, seconds)
        return resp

    @app.teardown_request
    def _end(_exc) -> None:
        tokens = g.pop("request_tokens", None)
        if tokens is None:
            return
        for var, token in zip((logs._request_id, logs._tenant_id), tokens):
            try:
                var.reset(token)
            except ValueError:   # torn down in another context (a streamed response): clear
                var.set(None)
