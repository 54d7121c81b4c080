"""Business-rule failures. Each carries the HTTP status and the stable `code` of docs/api.md, "Errors";
the web layer renders them, the CLI prints their message."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


class ServiceError(Exception):
    status = 400
    code = "validation_failed"

    def __init__(self, message: str, **extra):
        super().__init__(message)
        self.message = message
        self.extra = extra

    def body(self) -> dict:
        return {"error": self.message, "code": self.code, **self.extra}


class ValidationFailed(ServiceError):
    status, code = 400, "validation_failed"

    def __init__(self, message: str, details: list[dict] | None = None):
        super().__init__(message, details=details or [])


def _kind(name: str, status: int, code: str, doc: str | None = None) -> type[ServiceError]:
    """A ServiceError subclass that only fixes the status and the code."""
    return type(name, (ServiceError,), {"status": status, "code": code, "__doc__": doc, "__module__": __name__})


Unauthorized = _kind("Unauthorized", 401, "unauthorized")
Forbidden = _kind("Forbidden", 403, "forbidden")
NotFound = _kind("NotFound", 404, "not_found")
InvalidState = _kind("InvalidState", 409, "invalid_state")
Conflict = _kind("Conflict", 409, "conflict")
Gone = _kind("Gone", 410, "gone")
PlanLimit = _kind("PlanLimit", 403, "plan_limit")
FeatureNotOnPlan = _kind("FeatureNotOnPlan", 403, "feature_not_on_plan")
RateLimited = _kind("RateLimited", 429, "rate_limited")
BillingNotConfigured = _kind("BillingNotConfigured", 503, "billing_not_configured")
DatabaseUnavailable = _kind(
    "DatabaseUnavailable", 503, "database_unavailable",
    """The database cannot be reached for the moment (a restart, a failover): 503 with
    Retry-After, nothing changed (docs/deploy.md, "When PostgreSQL is unreachable").""")


def present(row: T | None, what: str) -> T:
    """`row`, or NotFound("<what> not found") when there is none (a lookup by id)."""
    if row is None:
        raise NotFound(f"{what} not found")
    return row
