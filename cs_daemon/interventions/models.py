from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Index, Text, text
from sqlmodel import Field

from ..db import TenantOwned, id_field, json_field, time_field


# delivered, and its outcome not yet known (interventions/outcomes.py)
OPEN = "attribution_until IS NOT NULL AND outcome IS NULL"


class Intervention(TenantOwned, table=True):
    """An action for one user on a channel; an escalation is one on channel `escalate`."""

    __tablename__ = "interventions"
    __table_args__ = (
        Index("ix_interventions_planned", "tenant_id", "planned_at"),
        Index("ix_interventions_user", "tenant_id", "user_id", "planned_at"),
        Index("ix_interventions_playbook", "tenant_id", "playbook_id", "status"),
        Index("ix_interventions_open", "tenant_id", "user_id", sqlite_where=text(OPEN),
              postgresql_where=text(OPEN)),
    )

    id: str = id_field()
    user_id: str = Field(max_length=255)
    playbook_id: str | None = Field(default=None, max_length=36)
    status: str = Field(max_length=20)
    channel: str = Field(max_length=20)
    message_body: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    reasoning: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    confidence: float | None = None
    source: str = Field(default="manual", max_length=20)     # engine | manual | external | delegated
    decision_id: str | None = Field(default=None, max_length=36)   # the engine decision's trace; null for manual
    quality_checks: list | dict | None = json_field()
    flagged: bool = False
    flag_reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))  # reject/rollback/escalation
    severity: str | None = Field(default=None, max_length=10)
    suggested_action: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    action_taken: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    handled_by: str | None = Field(default=None, max_length=80)
    outcome: str | None = Field(default=None, max_length=10)    # positive | negative | neutral | pending
    outcome_at: datetime | None = time_field()
    attribution_until: datetime | None = time_field()   # set on delivery: the outcome's window
    responded_at: datetime | None = time_field()        # the user's first response in it
    test: bool = False
    planned_at: datetime = time_field(nullable=False)
    approved_at: datetime | None = time_field()
    sent_at: datetime | None = time_field()
    delivered_at: datetime | None = time_field()
    updated_at: datetime = time_field(nullable=False)
