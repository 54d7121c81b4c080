from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Index, String, text
from sqlmodel import Field

from ..db import TenantOwned, id_field, json_field, time_field


class Customer(TenantOwned, table=True):
    """A tenant's end user. `id` is the tenant's own user id, as sent in events."""

    __tablename__ = "customers"
    __table_args__ = (
        Index("ix_customers_stage", "tenant_id", "lifecycle_stage"),
        Index("ix_customers_risk", "tenant_id", "risk_level"),
        Index("ix_customers_activity", "tenant_id", "last_activity_at"),
        Index("ix_customers_scored", "scored_at"),
        Index("ix_customers_created", "tenant_id", "created_at", "id"),   # lists, newest first
    )

    tenant_id: str = Field(foreign_key="tenants.id", primary_key=True, max_length=36)
    id: str = Field(primary_key=True, max_length=255)
    name: str | None = Field(default=None, max_length=255)
    email: str | None = Field(default=None, max_length=320)
    company: str | None = Field(default=None, max_length=255)
    role: str | None = Field(default=None, max_length=255)
    team_size: int | None = None
    locale: str | None = Field(default=None, max_length=35)
    traits: dict = json_field(default={}, nullable=False)
    lifecycle_stage: str = Field(default="new", max_length=20)
    health: float = 0.0
    activation_score: float = 0.0
    engagement_score: float = 0.0
    expansion_score: float = 0.0
    risk_level: str = Field(default="low", max_length=10)
    last_activity_at: datetime | None = time_field()
    created_at: datetime = time_field(nullable=False)
    updated_at: datetime = time_field(nullable=False)
    scored_at: datetime | None = time_field()
    test: bool = False
    state: dict = json_field(default={}, nullable=False)
    opted_out: list = json_field(default=[], nullable=False)   # channel names, or "all"


class Event(TenantOwned, table=True):
    """A tracked product event, kept exactly as sent (names are case-sensitive)."""

    __tablename__ = "events"
    __table_args__ = (
        Index("uq_events_idempotency", "tenant_id", "idempotency_key", unique=True,
              sqlite_where=text("idempotency_key IS NOT NULL"),
              postgresql_where=text("idempotency_key IS NOT NULL")),
        Index("ix_events_user", "tenant_id", "user_id", "event", "timestamp"),
        Index("ix_events_name_time", "tenant_id", "event", "timestamp", "user_id"),   # event clauses
    )

    id: str = id_field()
    tenant_id: str = Field(foreign_key="tenants.id", max_length=36)
    user_id: str = Field(max_length=255)
    event: str = Field(max_length=255)
    properties: dict = json_field(default={}, nullable=False)
    timestamp: datetime = time_field(nullable=False)
    received_at: datetime = time_field(nullable=False)
    source: str = Field(default="api", max_length=20)
    test: bool = False
    idempotency_key: str | None = Field(default=None, sa_column=Column(String(255), nullable=True))
