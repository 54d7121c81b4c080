from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, UUID4

from ..schemas import Wire

Channel = Literal["email", "in_app", "webhook", "crm"]


class InterventionPublic(Wire):
    id: str
    user_id: str
    playbook_id: str | None
    status: str
    channel: str
    message_body: str | None
    reasoning: str | None
    confidence: float | None
    planned_at: datetime | None
    approved_at: datetime | None
    sent_at: datetime | None
    delivered_at: datetime | None
    flagged: bool | None
    flag_reason: str | None
    quality_checks: Any = None
    source: str
    test: bool
    outcome: str | None = None      # extension: positive, negative or neutral once settled
    decision_id: str | None = None  # the engine decision that made it (its trace); null for manual ones


class InterventionList(Wire):
    interventions: list[InterventionPublic]


class ListQuery(Wire):
    limit: int = Field(50, ge=1, le=200)


class InterventionQuery(ListQuery):
    status: str | None = Field(None, max_length=20)     # extension: only this status


class InterventionCreate(Wire):
    user_id: str = Field(min_length=1, max_length=255)
    playbook_id: UUID4
    channel: Channel
    message_body: str | None = Field(None, max_length=20000)


class InterventionCreated(Wire):
    id: str
    status: str
    channel: str
    planned_at: datetime | None


class MessageEdit(Wire):
    message_body: str = Field(min_length=1, max_length=20000)


class MessageEdited(Wire):
    id: str
    status: str
    message_body: str | None
    quality_checks: Any = None


class IdStatus(Wire):
    id: str
    status: str


class RejectBody(Wire):
    reason: str = Field(max_length=2000)


class RollbackBody(Wire):
    reason: str | None = Field(None, max_length=2000)


class FlagBody(Wire):
    reason: str = Field(min_length=1, max_length=2000)


class Flagged(Wire):
    id: str
    flagged: bool


class EscalationPublic(Wire):
    id: str
    user_id: str
    playbook_id: str | None
    status: str | None
    severity: str | None
    reasoning: str | None
    suggested_action: str | None
    action_taken: str | None
    handled_by: str | None
    outcome: str | None
    created_at: datetime | None
    flagged: bool | None
    flag_reason: str | None
    test: bool

    @classmethod
    def of(cls, iv) -> "EscalationPublic":
        return cls(id=iv.id, user_id=iv.user_id, playbook_id=iv.playbook_id, status=iv.status,
                   severity=iv.severity, reasoning=iv.reasoning or iv.reason, suggested_action=iv.suggested_action,
                   action_taken=iv.action_taken, handled_by=iv.handled_by, outcome=iv.outcome,
                   created_at=iv.planned_at, flagged=iv.flagged, flag_reason=iv.flag_reason, test=iv.test)


class EscalationList(Wire):
    escalations: list[EscalationPublic]


class EscalationCreate(Wire):
    user_id: str = Field(min_length=1, max_length=255)
    playbook_id: UUID4
    severity: Literal["Critical", "High", "Medium", "Low"]
    reason: str = Field(min_length=1, max_length=2000)


class HandleBody(Wire):
    action_taken: str = Field(max_length=2000)
    outcome: Literal["positive", "negative", "neutral", "pending"] | None = None


class DelegateBody(Wire):
    channel: Channel = "email"
