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


class Unauthorized(ServiceError):
    status, code = 401, "unauthorized"


class Forbidden(ServiceError):
    status, code = 403, "forbidden"


class NotFound(ServiceError):
    status, code = 404, "not_found"


class InvalidState(ServiceError):
    status, code = 409, "invalid_state"


class Conflict(ServiceError):
    status, code = 409, "conflict"


class Gone(ServiceError):
    status, code = 410, "gone"


class PlanLimit(ServiceError):
    status, code = 403, "plan_limit"


class FeatureNotOnPlan(ServiceError):
    status, code = 403, "feature_not_on_plan"


class RateLimited(ServiceError):
    status, code = 429, "rate_limited"


class BillingNotConfigured(ServiceError):
    status, code = 503, "billing_not_configured"


class DatabaseUnavailable(ServiceError):
    """The database cannot be reached for the moment (a restart, a failover): 503 with
    Retry-After, nothing changed (docs/deploy.md, "When PostgreSQL is unreachable")."""
    status, code = 503, "database_unavailable"


def present(row: T | None, what: str) -> T:
    """`row`, or NotFound("<what> not found") when there is none (a lookup by id)."""
    if row is None:
        raise NotFound(f"{what} not found")
    return row
