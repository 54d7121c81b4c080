from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index
from sqlmodel import Field

from ..db import TenantOwned, id_field, json_field, time_field


class DecisionRequest(TenantOwned, table=True):
    """A decision owed to a user after new events: written with the events, so a lost job
    message delays the decision and never loses it."""

    __tablename__ = "decision_requests"
    __table_args__ = (Index("ix_decision_requests_open", "done_at", "created_at"),)

    id: str = id_field()
    user_id: str = Field(max_length=255)
    events: list = json_field(default=[], nullable=False)
    state_changed: bool = False
    test: bool = False      # the events were tracked with a test key: what is decided is test data
    created_at: datetime = time_field(nullable=False)
    claimed_until: datetime | None = time_field()
    done_at: datetime | None = time_field()
