from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from ..db import time_field


class StripeEvent(SQLModel, table=True):
    """A Stripe webhook event already applied, by Stripe's event id: a redelivery of the
    same event changes nothing."""

    __tablename__ = "stripe_events"

    id: str = Field(primary_key=True, max_length=255)
    type: str = Field(max_length=100)
    received_at: datetime = time_field(nullable=False)
