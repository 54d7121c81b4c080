from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from ..schemas import SentUrl, Wire, absent_when_none


class EndpointCreate(Wire):
    url: SentUrl
    description: str | None = Field(None, max_length=1000)
    events: list[str] | None = None


class EndpointUpdate(Wire):
    url: SentUrl | None = None
    description: str | None = Field(None, max_length=1000)
    events: list[str] | None = None


class EndpointPublic(Wire):
    id: str
    url: str
    description: str | None
    subscribed_events: list[str] | None
    active: bool
    created_at: datetime
    updated_at: datetime


class EndpointWithSecret(EndpointPublic):
    secret: str


class EndpointCreated(Wire):
    endpoint: EndpointWithSecret


class EndpointResponse(Wire):
    endpoint: EndpointPublic


class EndpointList(Wire):
    endpoints: list[EndpointPublic]


class Deleted(Wire):
    deleted: bool


class TestResult(Wire):
    """`success` always; `status`, `status_text` and `error` only when the attempt has one:
    they are a number and strings, never null (docs/api.md, "Other choices where the
    documents are silent")."""
    success: bool
    status: int | None = absent_when_none()
    status_text: str | None = absent_when_none()
    error: str | None = absent_when_none()


class TestResponse(Wire):
    test: TestResult


class AttemptPublic(Wire):
    number: int
    at: datetime
    status_code: int | None
    latency_ms: float
    error: str | None
    response_excerpt: str | None


class DeliveryPublic(Wire):
    id: str
    event_id: str | None
    event_type: str
    kind: str
    endpoint_id: str | None
    url: str
    status: str
    attempts: list[AttemptPublic]
    next_attempt_at: datetime | None
    created_at: datetime
    delivered_at: datetime | None
    test: bool

    @classmethod
    def of(cls, d, attempts) -> "DeliveryPublic":
        return cls(id=d.id, event_id=d.subject_id, event_type=d.event_type, kind=d.kind,
                   endpoint_id=d.endpoint_id, url=d.url, status=d.status,
                   attempts=[AttemptPublic.model_validate(a) for a in attempts],
                   next_attempt_at=d.next_attempt_at, created_at=d.created_at,
                   delivered_at=d.delivered_at, test=d.test)


class DeliveryList(Wire):
    deliveries: list[DeliveryPublic]


class DeliveryResponse(Wire):
    delivery: DeliveryPublic


class DeliveryQuery(Wire):
    status: Literal["pending", "retrying", "delivered", "failed", "canceled"] | None = None
    limit: int = Field(100, ge=1, le=1000)
