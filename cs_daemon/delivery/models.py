from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Index, Text
from sqlmodel import Field

from ..db import TenantOwned, id_field, json_field, time_field
from . import states


class Delivery(TenantOwned, table=True):
    """One message to send, with its retries: the durable record of work that must leave
    the service (webhook events, channel deliveries, action dispatches, mail), sent by
    its `channel`. The body is fixed at creation, so every attempt sends the same bytes."""

    __tablename__ = "deliveries"
    __table_args__ = (
        Index("ix_deliveries_due", "status", "next_attempt_at"),
        Index("ix_deliveries_endpoint", "tenant_id", "endpoint_id", "created_at"),
        Index("ix_deliveries_subject", "tenant_id", "subject_id"),
    )

    id: str = id_field()
    kind: str = Field(max_length=30)              # event | test | channel | dispatch
    channel: str = Field(max_length=30)           # the channel that sends it: webhook | crm | email | in_app | sink
    endpoint_id: str | None = Field(default=None, max_length=36)
    subject_id: str | None = Field(default=None, max_length=36)   # outbox event, intervention, action
    event_type: str = Field(max_length=100)
    url: str = Field(sa_column=Column(Text, nullable=False))
    body: str = Field(sa_column=Column(Text, nullable=False))
    headers: dict = json_field(default={}, nullable=False)
    secret_enc: str = Field(sa_column=Column(Text, nullable=False))
    status: str = Field(default=states.PENDING, max_length=10)    # states.STATUSES
    attempts: int = 0
    max_attempts: int = 6
    next_attempt_at: datetime | None = time_field()
    locked_until: datetime | None = time_field()
    test: bool = False
    created_at: datetime = time_field(nullable=False)
    updated_at: datetime = time_field(nullable=False)
    delivered_at: datetime | None = time_field()


class DeliveryAttempt(TenantOwned, table=True):
    __tablename__ = "delivery_attempts"
    __table_args__ = (Index("ix_attempts_delivery", "delivery_id", "number"),)

    id: str = id_field()
    delivery_id: str = Field(foreign_key="deliveries.id", max_length=36)
    number: int
    at: datetime = time_field(nullable=False)
    status_code: int | None = None
    latency_ms: float
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    response_excerpt: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
