from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index
from sqlmodel import Field

from ..db import TenantOwned, json_field, new_id, time_field


class InAppMessage(TenantOwned, table=True):
    """One in-app message queued for a user's stream (docs/channels.md, "The stream"). `seq` grows with
    every message written, so it is the stream's event id: a client that sends it back as
    Last-Event-ID gets only what came after. `body` is the message as the client sees it:
    {interventionId, type, body, playbookName, timestamp}."""

    __tablename__ = "in_app_messages"
    __table_args__ = (
        Index("ix_in_app_messages_user", "tenant_id", "user_id", "seq"),
        Index("ix_in_app_messages_intervention", "tenant_id", "intervention_id", unique=True),
    )

    seq: int | None = Field(default=None, primary_key=True)
    id: str = Field(default_factory=new_id, max_length=36, unique=True)
    user_id: str = Field(max_length=255)
    intervention_id: str = Field(max_length=36)
    body: dict = json_field(default={}, nullable=False)
    withdrawn_at: datetime | None = time_field()
    delivered_at: datetime | None = time_field()
    created_at: datetime = time_field(nullable=False)
