from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Text
from sqlmodel import Field, SQLModel

from ..db import id_field, json_field, time_field


class Tenant(SQLModel, table=True):
    __tablename__ = "tenants"

    id: str = id_field()
    name: str = Field(max_length=200)
    slug: str = Field(max_length=80, unique=True)
    config: dict = json_field(default={}, nullable=False)
    brand_context: dict | None = json_field()
    plan_tier: str = Field(default="trial", max_length=20)
    plan_status: str = Field(default="trialing", max_length=20)
    tracked_user_limit: int | None = Field(default=None)   # set from the plan; None is unlimited
    tracked_users: int = 0
    kill_switch_active: bool = False
    shadow_mode: bool = False
    partner: bool = False
    partner_tenant_id: str | None = Field(default=None, foreign_key="tenants.id", index=True, max_length=36)
    stripe_customer_id: str | None = Field(default=None, max_length=255, unique=True, index=True)  # the billing account
    # config.crm_webhook_secret, encrypted (crypto.py); never shown, only whether it is set
    crm_webhook_secret_enc: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    # config.milestones changed and the users' milestones are not re-read yet (the score
    # sweep does it: customers/milestones.py)
    milestones_changed_at: datetime | None = time_field()
    created_at: datetime = time_field(nullable=False)
