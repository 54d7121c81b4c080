from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index
from sqlmodel import Field

from ..db import TenantOwned, id_field, json_field, time_field


class OutboxEvent(TenantOwned, table=True):
    """An event for outbound webhooks, written in the same transaction as the change it
    reports; fan-out to endpoints reads it from here, so nothing is lost between."""

    __tablename__ = "outbox_events"
    __table_args__ = (Index("ix_outbox_pending", "fanned_out_at", "created_at"),)

    id: str = id_field()
    event_type: str = Field(max_length=100)
    payload: dict = json_field(default={}, nullable=False)
    test: bool = False
    created_at: datetime = time_field(nullable=False)
    fanned_out_at: datetime | None = time_field()
