from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Index, Text
from sqlmodel import Field

from ..db import TenantOwned, id_field, json_field, time_field


class ExternalAction(TenantOwned, table=True):
    """An action dispatched to a partner system (docs/external-actions.md); its outcomes also teach
    the recommender which actions work."""

    __tablename__ = "external_actions"
    __table_args__ = (
        Index("ix_external_actions_type", "tenant_id", "action_type", "status"),
        Index("ix_external_actions_user", "tenant_id", "user_id", "created_at"),
    )

    id: str = id_field()
    action_type: str = Field(max_length=100)          # the type's name
    action_type_id: str | None = Field(default=None, max_length=36)
    provider: str | None = Field(default=None, max_length=100)
    user_id: str = Field(max_length=255)
    status: str = Field(default="pending", max_length=12)
    parameters: dict = json_field(default={}, nullable=False)
    reasoning: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    confidence: float | None = None
    lifecycle_stage: str | None = Field(default=None, max_length=20)   # the user's stage when decided
    outcome_status: str | None = Field(default=None, max_length=12)
    outcome_result: dict | None = json_field()
    attempts: int = 0
    test: bool = False
    created_at: datetime = time_field(nullable=False)
    dispatched_at: datetime | None = time_field()
    delivered_at: datetime | None = time_field()
    completed_at: datetime | None = time_field()


class ActionType(TenantOwned, table=True):
    """A kind of action a partner system performs when the engine picks it."""

    __tablename__ = "action_types"
    __table_args__ = (Index("uq_action_types_name", "tenant_id", "name", unique=True),)

    id: str = id_field()
    name: str = Field(max_length=100)
    description: str = Field(sa_column=Column(Text, nullable=False))
    provider: str = Field(max_length=100)
    parameters_schema: dict = json_field(default={}, nullable=False)
    delivery_webhook: str = Field(sa_column=Column(Text, nullable=False))
    domain: str | None = Field(default=None, max_length=100)
    estimated_cost_usd: str | None = Field(default=None, max_length=32)
    secret_enc: str = Field(sa_column=Column(Text, nullable=False))
    platform_id: str | None = Field(default=None, max_length=100)
    active: bool = True
    created_at: datetime = time_field(nullable=False)
    updated_at: datetime = time_field(nullable=False)


class PlatformConnection(TenantOwned, table=True):
    """A tenant's connection to a pre-built platform; credentials encrypted at rest."""

    __tablename__ = "platform_connections"
    __table_args__ = (Index("uq_platform_connections", "tenant_id", "platform_id", unique=True),)

    id: str = id_field()
    platform_id: str = Field(max_length=100)
    credentials_enc: str = Field(sa_column=Column(Text, nullable=False))
    connected: bool = True
    connected_at: datetime | None = time_field()
    disconnected_at: datetime | None = time_field()
