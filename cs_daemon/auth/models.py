from __future__ import annotations

from datetime import datetime

from sqlmodel import Field

from ..db import TenantOwned, id_field, json_field, time_field


class ApiKey(TenantOwned, table=True):
    __tablename__ = "api_keys"

    id: str = id_field()
    member_id: str | None = Field(default=None, foreign_key="members.id", max_length=36)
    label: str | None = Field(default=None, max_length=200)
    role: str = Field(max_length=10)
    permissions: list = json_field(default=[], nullable=False)
    test: bool = False
    # who minted it through the API: a member id, or "key:<key id>" for a key tied to no
    # member (docs/api.md, "API keys"); None when the operator's CLI made it
    created_by: str | None = Field(default=None, max_length=80)
    prefix: str = Field(max_length=12)
    digest: str = Field(max_length=64, unique=True)
    created_at: datetime = time_field(nullable=False)
    last_used_at: datetime | None = time_field()
    revoked_at: datetime | None = time_field()
