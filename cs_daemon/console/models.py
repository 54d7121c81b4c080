from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index
from sqlmodel import Field

from ..db import TenantOwned, id_field, time_field


class SignInLink(TenantOwned, table=True):
    """A one-time sign-in link mailed to a team member; only the token's digest is kept."""

    __tablename__ = "console_sign_in_links"
    __table_args__ = (Index("ix_console_links_member", "tenant_id", "member_id", "expires_at"),)

    id: str = id_field()
    member_id: str = Field(foreign_key="members.id", max_length=36)
    token_digest: str = Field(max_length=64, unique=True)
    created_at: datetime = time_field(nullable=False)
    expires_at: datetime = time_field(nullable=False)
    used_at: datetime | None = time_field()


class ConsoleSession(TenantOwned, table=True):
    """A signed-in browser: a team member (by link) or an API key (pasted once). The
    cookie holds a random token whose digest is the key here; `csrf_token` is the token
    every form of the session carries."""

    __tablename__ = "console_sessions"

    id: str = id_field()
    token_digest: str = Field(max_length=64, unique=True)
    member_id: str | None = Field(default=None, foreign_key="members.id", max_length=36)
    key_id: str | None = Field(default=None, foreign_key="api_keys.id", max_length=36)
    csrf_token: str = Field(max_length=64)
    data_view: str = Field(default="both", max_length=4)      # live | test | both
    created_at: datetime = time_field(nullable=False)
    last_seen_at: datetime = time_field(nullable=False)
    expires_at: datetime = time_field(nullable=False)
    ended_at: datetime | None = time_field()
