"""The tenant's `config`: every key the service reads, with its type and range, in one
model (docs/tenant-config.md is its reference). Adding a key is one line here.

Two ways in:

- `check(config)` on every write: a wrong type or an out-of-range value is a
  ValidationFailed naming the field (`config.churned_after_days`), so nothing invalid is
  stored. Values must already have their JSON type (no "30" for 30).
- `read(config)` wherever the service acts on a stored config: a value that does not
  validate (stored before these rules, or written straight into the database) is left
  out, so its default applies; it never stops a request or a sweep. `cs doctor` lists
  such values.

A key that is not set, or set to null, means "the product default" (docs/scoring.md,
docs/decisions.md). Keys the service does not know are kept as they are.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from ..errors import ValidationFailed
from ..schemas import error_details

log = logging.getLogger(__name__)

APPROVAL_MODES = ("suggest_only", "semi_auto", "full_auto")
AUTO_APPROVE_MIN_CONFIDENCE = 0.8
DEFAULT_HOLDOUT_PERCENT = 5
# the agent (docs/ai.md, "The agent")
AI_MAX_STEPS = 8
AI_TIME_BUDGET_S = 20.0
DEFAULT_TRACE_RETENTION_DAYS = 30
DEFAULT_EVENT_LOG_RETENTION_DAYS = 30
MAX_EVENT_NAMES = 100
# derived when shown, never stored (docs/tenant-config.md, "The CRM channel")
SHOWN_ONLY = frozenset({"crm_webhook_secret_set"})
# set by their own endpoint only, never by PATCH /api/settings (docs/tenant-config.md)
SET_BY_ENDPOINT = {"shadow_mode_expires_at": "PUT /api/settings/shadow-mode"}


def _aware_datetime(value: str) -> str:
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("must be an ISO 8601 date and time") from None
    if at.tzinfo is None:
        raise ValueError("must carry a time zone offset (e.g. +00:00)")
    return value


def _http_url(value: str) -> str:
    if not value.startswith(("https://", "http://")):
        raise ValueError("must be an https:// URL (http:// where private URLs are allowed)")
    return value


EventName = Annotated[str, Field(min_length=1, max_length=255)]
EventNames = Annotated[list[EventName], Field(max_length=MAX_EVENT_NAMES)]
Days = Annotated[float, Field(gt=0, le=3650)]
Score = Annotated[float, Field(ge=0, le=100)]
Probability = Annotated[float, Field(ge=0, le=1)]
Timestamp = Annotated[str, AfterValidator(_aware_datetime)]
HttpUrl = Annotated[str, Field(max_length=2000), AfterValidator(_http_url)]


class _Typed(BaseModel):
    # strict: a JSON number for a number, a boolean for a boolean (no "30", no 1 for true)
    model_config = ConfigDict(strict=True, extra="forbid")


class HealthWeights(_Typed):
    activation: Score | None = None
    engagement: Score | None = None
    expansion: Score | None = None


class RiskThresholds(_Typed):
    medium: Score | None = None
    high: Score | None = None
    critical: Score | None = None


Cap = Annotated[int, Field(ge=0, le=1_000_000)]


class ChannelCaps(_Typed):
    max_per_user_per_day: Cap | None = None
    max_per_user_per_week: Cap | None = None


class ChannelsCaps(_Typed):
    email: ChannelCaps | None = None
    in_app: ChannelCaps | None = None
    webhook: ChannelCaps | None = None
    crm: ChannelCaps | None = None


class ContactPolicy(_Typed):
    """How often the engine may contact one user, over every playbook and channel
    (docs/decisions.md, "Contact policy")."""

    max_per_user_per_day: Cap | None = None
    max_per_user_per_week: Cap | None = None
    min_hours_between: Annotated[float, Field(ge=0, le=87_600)] | None = None
    channels: ChannelsCaps | None = None
    exempt_playbooks: Annotated[list[Annotated[str, Field(min_length=1, max_length=36)]],
                                Field(max_length=1000)] | None = None


class TenantConfig(_Typed):
    model_config = ConfigDict(extra="allow")

    # decisions (docs/decisions.md, "Approval")
    approvalMode: Literal["suggest_only", "semi_auto", "full_auto"] | None = None
    auto_approve_min_confidence: Probability | None = None
    onboardingCompleted: bool | None = None
    shadow_mode_expires_at: Timestamp | None = None
    # the share of users held out of engine actions (docs/decisions.md, "Holdout and uplift")
    holdout_percent: Annotated[float, Field(ge=0, le=50)] | None = None
    # learning (docs/decisions.md, "Learning"): traits whose values are decision features
    decision_features: Annotated[list[Annotated[str, Field(min_length=1, max_length=40)]],
                                 Field(max_length=10)] | None = None
    # one contact policy over every playbook and channel (docs/decisions.md, "Contact policy")
    contact_policy: ContactPolicy | None = None
    # the agent (docs/ai.md, "The agent"): on when a model is configured, unless false
    ai_decisions: bool | None = None
    ai_max_steps: Annotated[int, Field(ge=1, le=32)] | None = None
    ai_daily_token_budget: Annotated[int, Field(ge=0)] | None = None       # null: no limit
    ai_time_budget_s: Annotated[float, Field(gt=0, le=120)] | None = None
    # how long decision traces are kept (docs/decisions.md, "The decision trace")
    trace_retention_days: Annotated[float, Field(ge=1, le=3650)] | None = None
    # how long the event log keeps each recorded event (docs/architecture.md, "The event log")
    event_log_retention_days: Annotated[float, Field(ge=1, le=3650)] | None = None
    # scoring (docs/scoring.md)
    milestones: EventNames | None = None
    expansion_events: EventNames | None = None
    churn_events: EventNames | None = None
    health_weights: HealthWeights | None = None
    engagement_half_life_days: Days | None = None
    engagement_saturation: Annotated[float, Field(gt=0, le=10_000)] | None = None
    new_for_hours: Annotated[float, Field(ge=0, le=87_600)] | None = None
    onboarding_days: Annotated[float, Field(ge=0, le=3650)] | None = None
    engaged_min_engagement: Score | None = None
    dormant_after_days: Days | None = None
    churned_after_days: Days | None = None
    risk_thresholds: RiskThresholds | None = None
    risk_trend_drop: Score | None = None
    # the CRM channel (docs/channels.md): the secret is write-only, kept encrypted apart
    crm_webhook_url: HttpUrl | None = None
    crm_webhook_secret: Annotated[str, Field(min_length=1, max_length=500)] | None = None

    @property
    def approval_mode(self) -> str:
        return self.approvalMode or "suggest_only"

    @property
    def auto_approve_threshold(self) -> float:
        return AUTO_APPROVE_MIN_CONFIDENCE if self.auto_approve_min_confidence is None \
            else self.auto_approve_min_confidence

    @property
    def holdout(self) -> float:
        return DEFAULT_HOLDOUT_PERCENT if self.holdout_percent is None else self.holdout_percent

    @property
    def agent_on(self) -> bool:
        return self.ai_decisions is not False

    @property
    def agent_max_steps(self) -> int:
        return AI_MAX_STEPS if self.ai_max_steps is None else self.ai_max_steps

    @property
    def agent_time_budget_s(self) -> float:
        return AI_TIME_BUDGET_S if self.ai_time_budget_s is None else self.ai_time_budget_s

    @property
    def trace_retention(self) -> float:
        return DEFAULT_TRACE_RETENTION_DAYS if self.trace_retention_days is None else self.trace_retention_days

    @property
    def event_log_retention(self) -> float:
        return DEFAULT_EVENT_LOG_RETENTION_DAYS if self.event_log_retention_days is None \
            else self.event_log_retention_days

    @property
    def shadow_mode_expires(self) -> datetime | None:
        return datetime.fromisoformat(self.shadow_mode_expires_at) if self.shadow_mode_expires_at else None

    def scoring(self) -> dict[str, Any]:
        """The scoring keys that are set, as engine/scoring.py takes them (a key left
        out takes its default there)."""
        return self.model_dump(exclude_none=True, include=SCORING_KEYS)


SCORING_KEYS = frozenset({
    "milestones", "expansion_events", "churn_events", "health_weights", "engagement_half_life_days",
    "engagement_saturation", "new_for_hours", "onboarding_days", "engaged_min_engagement",
    "dormant_after_days", "churned_after_days", "risk_thresholds", "risk_trend_drop",
})
KNOWN_KEYS = frozenset(TenantConfig.model_fields)


def shown(config: dict | None, *, secret_set: bool) -> dict:
    """The config as the API and the CLI show it: never the CRM secret, only whether one
    is set."""
    out = {k: v for k, v in (config or {}).items() if k != "crm_webhook_secret"}
    out["crm_webhook_secret_set"] = secret_set
    return out


def problems(config: Any) -> list[dict]:
    """What does not validate in a config: [{field, message}], fields named `config.…`."""
    if not isinstance(config, dict):
        return [{"field": "config", "message": "must be an object"}]
    try:
        TenantConfig.model_validate(config)
    except ValidationError as exc:
        return error_details(exc, "config")
    return []


def check(config: dict) -> TenantConfig:
    """The config about to be stored, typed; ValidationFailed naming every bad field."""
    details = problems(config)
    if details:
        first = details[0]
        raise ValidationFailed(f"invalid settings: {first['field']}: {first['message']}", details)
    return TenantConfig.model_validate(config)


def read(config: Any) -> TenantConfig:
    """A stored config, typed: each key that does not validate is left out (its default
    applies). Never raises."""
    if not isinstance(config, dict):
        return TenantConfig()
    try:
        return TenantConfig.model_validate(config)
    except ValidationError as exc:
        bad = {e["loc"][0] for e in exc.errors() if e["loc"]}
        _warn_once(bad)
        try:
            return TenantConfig.model_validate({k: v for k, v in config.items() if k not in bad})
        except ValidationError:
            return TenantConfig()


def scoring_of(config: Any) -> dict[str, Any]:
    """The valid scoring keys of a stored config, as engine/scoring.py takes them."""
    return read(config).scoring()


_warned: set[str] = set()


def _warn_once(keys: set) -> None:
    fresh = {str(k) for k in keys} - _warned
    if fresh and len(_warned) < 1000:
        _warned.update(fresh)
        log.warning("stored tenant config holds invalid %s: defaults used (see cs doctor)", ", ".join(sorted(fresh)))
