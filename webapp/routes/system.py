"""System: health and the OpenAPI document."""

from __future__ import annotations

from typing import Any

from flask import current_app

from cs_daemon import health
from cs_daemon.schemas import Wire

from ..api import Api, Call, render
from ..openapi import document

api = Api("System")


class SweepFailure(Wire):
    sweep: str
    tenant_id: str
    error: str
    at: str
    count: int


class CheckResult(Wire):
    status: str
    latency_ms: float | None = None
    error: str | None = None
    failing: int | None = None                  # the sweeps check: tenants whose sweep failed
    failures: list[SweepFailure] | None = None


class HealthReport(Wire):
    status: str
    checks: dict[str, CheckResult]
    version: str
    uptime_seconds: float


@api.route("GET", "/api/health", access="public", response=HealthReport, address_limit="health",
           summary="Health of the database, cache, language model and job runner",
           responses={503: HealthReport})
def get_health(call: Call):
    body, healthy = health.check(call.rt)
    return body, 200 if healthy else 503


@api.route("GET", "/api/openapi.json", access="public",
           summary="This OpenAPI 3.1 document")
def get_openapi(call: Call):
    doc: dict[str, Any] = current_app.extensions.setdefault("openapi", document(current_app.extensions["cs_apis"]))
    return render(doc)
