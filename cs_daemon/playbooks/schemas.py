from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ConfigDict, Field, field_validator

from ..schemas import Wire

Channel = Literal["email", "in_app", "webhook", "crm"]
Status = Literal["draft", "active", "paused", "archived"]
_HHMM = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")


class Strict(Wire):
    """Stored playbook settings: JSON types as documented (a number, not "24"); unknown
    keys are dropped (docs/decisions.md, "Constraints and hints")."""

    model_config = ConfigDict(strict=True)


class QuietHours(Strict):
    start: str
    end: str
    timezone: str = "UTC"

    @field_validator("start", "end")
    @classmethod
    def _hhmm(cls, value: str) -> str:
        if not _HHMM.match(value):
            raise ValueError("must be HH:MM (24 h)")
        return value

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("must be an IANA time zone such as Europe/Berlin") from None
        return value


class Constraints(Strict):
    channels: list[Channel] | None = Field(None, max_length=len(Channel.__args__))
    max_per_user: int | None = Field(None, ge=0, le=1_000_000)
    cooldown_hours: float | None = Field(None, ge=0, le=87_600)      # ten years
    max_per_day: int | None = Field(None, ge=0, le=1_000_000)
    quiet_hours: QuietHours | None = None
    min_confidence: float | None = Field(None, ge=0, le=1)
    require_approval: bool | None = None


class Escalate(Strict):
    severity: Literal["Critical", "High", "Medium", "Low"] = "Medium"


class StrategyHints(Strict):
    goal: str | None = Field(None, max_length=500)
    tone: str | None = Field(None, max_length=200)
    preferred_channel: Channel | None = None
    message_template: str | None = Field(None, max_length=5000)
    cta_url: str | None = Field(None, max_length=2000)
    priority: int | None = Field(None, ge=-1000, le=1000)
    action_type: str | None = Field(None, max_length=100)
    action_parameters: dict[str, Any] | None = None
    escalate: Escalate | None = None


class PlaybookWrite(Wire):
    name: str | None = Field(None, min_length=1, max_length=200)
    lifecycle_area: str | None = Field(None, max_length=50)
    entry_conditions: dict[str, Any] | None = None
    exit_conditions: dict[str, Any] | None = None
    constraints: Constraints | None = None
    strategy_hints: StrategyHints | None = None


class PlaybookCreate(PlaybookWrite):
    name: str = Field(min_length=1, max_length=200)


class Arm(Wire):
    """One arm of an uplift comparison: interventions with a settled outcome, and how many
    of them were positive (docs/decisions.md, "Holdout and uplift")."""

    n: int
    positive: int


class Uplift(Wire):
    uplift: float | None = None
    uplift_ci: list[float] | None = Field(None, min_length=2, max_length=2)
    uplift_significant: bool = False
    treated: Arm = Arm(n=0, positive=0)
    held_out: Arm = Arm(n=0, positive=0)


class PlaybookPublic(Uplift):
    id: str
    name: str
    status: str
    lifecycle_area: str | None
    entry_conditions: dict[str, Any] | None
    exit_conditions: dict[str, Any] | None
    constraints: dict[str, Any] | None
    strategy_hints: dict[str, Any] | None
    created_at: datetime | None
    status_changed_at: datetime | None
    success_rate: float | None = None
    test: bool = False


class PlaybookList(Wire):
    playbooks: list[PlaybookPublic]


class StatusChange(Wire):
    status: Status


class StatusChanged(Wire):
    id: str
    status: str
    status_changed_at: datetime | None


class Archived(Wire):
    archived: bool


class PreviewRequest(Wire):
    entry_conditions: dict[str, Any]


class PreviewCount(Wire):
    matching_users: int
