from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Text
from sqlmodel import Field

from ..db import TenantOwned, id_field, json_field, time_field


class WebhookEndpoint(TenantOwned, table=True):
    __tablename__ = "webhook_endpoints"

    id: str = id_field()
    url: str = Field(sa_column=Column(Text, nullable=False))
    description: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    subscribed_events: list | None = json_field()
    secret_enc: str = Field(sa_column=Column(Text, nullable=False))
    active: bool = True
    created_at: datetime = time_field(nullable=False)
    updated_at: datetime = time_field(nullable=False)
