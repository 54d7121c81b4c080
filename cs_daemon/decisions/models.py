from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Index, Integer, text
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
    claimed_until: datetime | None = time_field()   # leased until; after a failed try, not before
    done_at: datetime | None = time_field()
    # tries so far (each claim counts one); past requests.MAX_ATTEMPTS the request is
    # `failed` (failed_at set) and left alone, with the last error kept
    attempts: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default=text("0")))
    failed_at: datetime | None = time_field()
    last_error: str | None = Field(default=None, max_length=500)
