from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pydantic import EmailStr, Field, field_validator

from ..interventions.schemas import InterventionPublic
from ..schemas import Wire
from . import fields


class TrackedEvent(Wire):
    user_id: str = Field(min_length=1, max_length=255)
    event: str = Field(min_length=1, max_length=255)
    properties: dict[str, Any] = Field(default_factory=dict)
    timestamp: datetime | None = None
    idempotency_key: str | None = Field(None, min_length=1, max_length=255)

    @field_validator("timestamp")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value


class TrackRequest(Wire):
    events: list[TrackedEvent] = Field(min_length=1, max_length=100)


class TrackResult(Wire):
    accepted: int
    duplicates: int
    over_limit: int


class NextAction(Wire):
    """The user's next pending intervention; `intervention_id` is an extension (to approve it)."""
    channel: str
    status: str
    playbook: str
    intervention_id: str


class CustomerPublic(Wire):
    id: str
    name: str
    email: str | None
    company: str | None
    role: str | None
    team_size: float | None
    locale: str | None
    lifecycle_stage: str
    health: float
    activation_score: float
    engagement_score: float
    expansion_score: float
    risk_level: str
    last_activity_at: datetime | None
    created_at: datetime | None
    traits: dict[str, Any]
    test: bool

    @classmethod
    def of(cls, c, **extra) -> "CustomerPublic":
        return cls(id=c.id, **{**{f: getattr(c, f) for f in fields.ALL}, "name": c.name or c.id},
                   created_at=c.created_at, traits=c.traits or {}, test=c.test, **extra)


class CustomerListItem(CustomerPublic):
    next_action: NextAction | None = None


class CustomerDetail(CustomerPublic):
    milestone_progress: Any = None
    segment_memberships: Any = None


class CustomerEvent(Wire):
    id: str
    event: str
    properties: dict[str, Any]
    timestamp: datetime
    received_at: datetime
    source: str
    test: bool


class CustomerDetailResponse(Wire):
    customer: CustomerDetail
    events: list[CustomerEvent]
    interventions: list[InterventionPublic]


class CustomerList(Wire):
    customers: list[CustomerListItem]
    next_cursor: str | None


class CustomerListQuery(Wire):
    limit: int = Field(100, ge=1, le=1000)
    cursor: str | None = None


class CustomerCreate(Wire):
    user_id: str = Field(min_length=1, max_length=255)
    email: EmailStr | None = None
    name: str | None = Field(None, max_length=255)
    properties: dict[str, Any] = Field(default_factory=dict)


class CustomerCreated(Wire):
    user: CustomerPublic


class CustomerStats(Wire):
    total: int
    active: int
    at_risk: int
    churned: int


class CustomerStatsResponse(Wire):
    stats: CustomerStats
