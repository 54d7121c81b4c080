from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, text
from sqlmodel import Field

from ..db import TenantOwned, id_field, new_id, time_field

ROLES = ("admin", "editor", "viewer")


LIVE_MEMBER = "removed_at IS NULL"


class Member(TenantOwned, table=True):
    __tablename__ = "members"
    __table_args__ = (
        # one live member per email and tenant (a removed member may be invited again)
        Index("ux_members_email", "tenant_id", text("lower(email)"), unique=True,
              sqlite_where=text(LIVE_MEMBER), postgresql_where=text(LIVE_MEMBER)),
    )

    id: str = id_field()
    user_id: str = Field(default_factory=new_id, max_length=36)
    email: str = Field(max_length=320)
    name: str | None = Field(default=None, max_length=200)
    role: str = Field(max_length=10)
    created_at: datetime = time_field(nullable=False)
    removed_at: datetime | None = time_field()


class Invitation(TenantOwned, table=True):
    __tablename__ = "invitations"

    id: str = id_field()
    email: str = Field(max_length=320)
    role: str = Field(max_length=10)
    status: str = Field(default="pending", max_length=10)      # pending | accepted | revoked
    token_digest: str = Field(max_length=64, unique=True)
    invited_by: str | None = Field(default=None, max_length=80)
    test: bool = False      # made with a test key: its member gets a test key (docs/api.md, "Test mode")
    expires_at: datetime = time_field(nullable=False)
    created_at: datetime = time_field(nullable=False)
    accepted_at: datetime | None = time_field()
