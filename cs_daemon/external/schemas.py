from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator

from ..clock import in_utc
from ..schemas import EventTime, SentUrl, Wire

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
CUSTOM_TYPE_RE = re.compile(r"^custom\.[a-z0-9_]+(\.[a-z0-9_]+)+$")


class ActionTypeFields(Wire):
    name: str | None = Field(None, min_length=1, max_length=100)
    description: str | None = Field(None, min_length=1, max_length=5000)
    provider: str | None = Field(None, min_length=1, max_length=100)
    parameters_schema: dict[str, Any] | None = None
    delivery_webhook: SentUrl | None = None
    domain: str | None = Field(None, max_length=100)
    estimated_cost_usd: str | None = Field(None, max_length=32, pattern=r"^\d+(\.\d+)?$")

    @field_validator("name")
    @classmethod
    def _snake(cls, value):
        if value is not None and not NAME_RE.match(value):
            raise ValueError("must be snake_case (lowercase letters, digits and _)")
        return value


class ActionTypeCreate(ActionTypeFields):
    name: str = Field(min_length=1, max_length=100)
    description: str = Field(min_length=1, max_length=5000)
    provider: str = Field(min_length=1, max_length=100)
    parameters_schema: dict[str, Any]
    delivery_webhook: SentUrl


class ActionTypeCreated(Wire):
    id: str
    name: str
    webhook_secret: str


class ActionTypeCreatedResponse(Wire):
    action_type: ActionTypeCreated


class ActionTypePublic(Wire):
    id: str
    name: str
    description: str
    provider: str
    parameters_schema: dict[str, Any]
    delivery_webhook: str
    domain: str | None
    estimated_cost_usd: str | None
    active: bool
    platform_id: str | None
    created_at: datetime
    updated_at: datetime


class ActionTypeResponse(Wire):
    action_type: ActionTypePublic


class ActionTypeList(Wire):
    action_types: list[ActionTypePublic]


class ActionTypeQuery(Wire):
    provider: str | None = None
    domain: str | None = None
    active: bool | None = None


class Deactivated(Wire):
    deactivated: bool


class ActionCreate(Wire):
    action_type: str = Field(min_length=1, max_length=100)
    user_id: str = Field(min_length=1, max_length=255)
    parameters: dict[str, Any] = Field(default_factory=dict)
    decision_id: str | None = Field(None, min_length=1, max_length=36)   # extension: the recommendation it follows


class ActionPublic(Wire):
    id: str
    action_type: str
    provider: str | None
    user_id: str
    status: str
    parameters: dict[str, Any]
    outcome_status: str | None
    outcome_result: dict[str, Any] | None
    attempts: int
    dispatched_at: datetime | None
    completed_at: datetime | None
    created_at: datetime
    test: bool


class ActionResponse(Wire):
    action: ActionPublic


class ActionList(Wire):
    actions: list[ActionPublic]


class ActionQuery(Wire):
    status: Literal["pending", "dispatched", "delivered", "completed", "failed", "expired"] | None = None
    provider: str | None = None
    user_id: str | None = None
    since: datetime | None = None
    limit: int = Field(50, ge=1, le=100)

    @field_validator("since")
    @classmethod
    def _utc(cls, value):
        return None if value is None else in_utc(value)


class OutcomeReport(Wire):
    status: Literal["completed", "ignored", "rejected", "partial"]
    result: dict[str, Any] = Field(default_factory=dict)


class OutcomeRecorded(Wire):
    recorded: bool
    action_id: str
    outcome_status: str


class CustomEvent(Wire):
    type: str = Field(max_length=255)
    user_id: str = Field(min_length=1, max_length=255)
    data: dict[str, Any] = Field(default_factory=dict)
    timestamp: EventTime = None

    @field_validator("type")
    @classmethod
    def _custom(cls, value):
        if not CUSTOM_TYPE_RE.match(value):
            raise ValueError("must start with custom. and use lowercase dot notation (custom.<domain>.<name>)")
        return value

    @field_validator("timestamp")
    @classmethod
    def _utc(cls, value):
        return None if value is None else in_utc(value)


class CustomEventBatch(Wire):
    events: list[Any] = Field(min_length=1, max_length=100)


class CustomEventResult(Wire):
    accepted: int
    rejected: int
    errors: list[dict[str, Any]]
    over_limit: int | None = Field(None, description="Events of new users past the plan's tracked_user_limit: "
                                                  "not stored, not broadcast; present only when some were")


class Accepted(Wire):
    accepted: int
    over_limit: int | None = Field(None, description="1 when the event's user is new and past the plan's "
                                                  "tracked_user_limit: not stored, not broadcast; present only then")


class Platform(Wire):
    id: str
    name: str
    description: str
    domain: str
    credential_fields: list[str]
    connected: bool
    connected_at: datetime | None
    action_types: list[str]


class PlatformList(Wire):
    platforms: list[Platform]


class PlatformResponse(Wire):
    platform: Platform


class PlatformConnected(Wire):
    platform: Platform
    webhook_secrets: dict[str, str] = Field(
        default_factory=dict, description="Extension: the signing secret of each action type this connect "
                                          "registered, by name; shown once (a reconnect keeps and hides them)")


class ConnectBody(Wire):
    credentials: dict[str, Any] = Field(default_factory=dict)
