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


_SERIES_KEPT = 1000
_series: dict[tuple, tuple] = {}   # (method, rule, status) -> its counter and histogram children


def _count(status: int, seconds: float) -> None:
    """Requests by their URL rule (not the raw path: ids would make a series each). The
    children of a method, rule and status are looked up once (labels() takes a lock and
    builds the label values each time), for as many as _SERIES_KEPT."""
    rule = request.url_rule.rule if request.url_rule is not None else None
    key = (request.method, rule, status)
    try:
        series = _series.get(key)
        if series is None:
            route = _CONVERTER.sub("<", rule) if rule is not None else "unmatched"
            series = (metrics.REQUESTS.labels(method=request.method, route=route, status=str(status)),
                      metrics.LATENCY.labels(method=request.method, route=route))
            if len(_series) < _SERIES_KEPT:
                _series[key] = series
        series[0].inc()
        series[1].observe(seconds)
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
