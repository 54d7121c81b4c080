from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index
from sqlmodel import Field

from ..db import TenantOwned, id_field, json_field, time_field


class OutboxEvent(TenantOwned, table=True):
    """An event the service recorded (the log of them; docs/architecture.md, "The event
    log"), written in the same transaction as the change it reports, together with its
    webhook deliveries (whose `subject_id` is its id)."""

    __tablename__ = "outbox_events"
    # the listing (newest first) and the retention sweep read a tenant's events by time;
    # the index serves every lookup by tenant too, so tenant_id has no index of its own
    # (ingest writes these rows on its hot path: one index to maintain, not two)
    __table_args__ = (Index("ix_outbox_events_created", "tenant_id", "created_at"),)

    tenant_id: str = Field(foreign_key="tenants.id", max_length=36)
    id: str = id_field()
    event_type: str = Field(max_length=100)
    payload: dict = json_field(default={}, nullable=False)
    test: bool = False
    created_at: datetime = time_field(nullable=False)
