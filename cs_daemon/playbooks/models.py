from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Index, Integer, text
from sqlmodel import Field

from ..db import TenantOwned, id_field, json_field, time_field

STATUSES = ("draft", "active", "paused", "archived")
_REVISION = Column("revision", Integer, nullable=False, server_default=text("1"))


class Playbook(TenantOwned, table=True):
    __tablename__ = "playbooks"
    __table_args__ = (Index("ix_playbooks_status", "tenant_id", "status"),)

    id: str = id_field()
    name: str = Field(max_length=200)
    status: str = Field(default="draft", max_length=10)
    lifecycle_area: str | None = Field(default=None, max_length=50)
    entry_conditions: dict = json_field(default={}, nullable=False)
    exit_conditions: dict = json_field(default={}, nullable=False)
    constraints: dict = json_field(default={}, nullable=False)
    strategy_hints: dict = json_field(default={}, nullable=False)
    test: bool = False
    created_at: datetime = time_field(nullable=False)
    updated_at: datetime = time_field(nullable=False)
    status_changed_at: datetime | None = time_field()
    # moved by SQLAlchemy on every UPDATE of the row (version_id_col): the engine keeps
    # compiled playbooks per (id, revision), which no edit can leave stale
    revision: int = Field(default=1, sa_column=_REVISION)

    __mapper_args__ = {"version_id_col": _REVISION}
