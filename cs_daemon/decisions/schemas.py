from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any

from pydantic import Field, field_validator

from ..schemas import Wire, absent_when_none


class DryRunRequest(Wire):
    user_id: str = Field(min_length=1, max_length=255)


class DecisionPublic(Wire):
    """The dry run's `decision`: `action` always; the others are strings (confidence a
    number), never null, so one the decision has no value for is left out (docs/api.md,
    "Other choices where the documents are silent")."""
    action: str
    playbook_id: str | None = absent_when_none()
    channel: str | None = absent_when_none()
    reasoning: str | None = absent_when_none()
    reason: str | None = absent_when_none()
    confidence: float | None = absent_when_none()
    severity: str | None = absent_when_none()
    action_type: str | None = absent_when_none()


class DecisionContext(Wire):
    lifecycle_stage: str
    activation_score: float
    risk_level: str
    matched_playbooks: int


class DryRunResponse(Wire):
    dry_run: bool = True
    decision: DecisionPublic
    rules: dict[str, Any]
    context: DecisionContext
    # the options the rules allow and the agent's run, when a model is configured
    # (docs/ai.md, "The agent")
    options: list[dict[str, Any]] = Field(default_factory=list)
    agent: dict[str, Any] | None = None
    trace: dict[str, Any] | None = None     # extension: the decision's trace (docs/decisions.md)

    @classmethod
    def of(cls, made, customer, agent=None, trace: dict | None = None) -> "DryRunResponse":
        return cls(
            options=list(made.options), agent=agent.as_dict() if agent is not None else None, trace=trace,
            decision=DecisionPublic(action=made.action, playbook_id=made.playbook_id, channel=made.channel,
                                    reasoning=made.reasoning, reason=made.reason, confidence=made.confidence,
                                    severity=made.severity, action_type=made.action_type),
            rules={pid: v.as_dict() for pid, v in made.rules.items()},
            context=DecisionContext(lifecycle_stage=customer.lifecycle_stage,
                                    activation_score=customer.activation_score,
                                    risk_level=customer.risk_level, matched_playbooks=made.matched_playbooks))


class RecommendRequest(Wire):
    user_id: str = Field(min_length=1, max_length=255)
    domain: str | None = Field(None, max_length=100)
    # each an action type's name, 1 to 100 characters like the name itself (docs/api.md,
    # "Other choices where the documents are silent")
    available_actions: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(min_length=1, max_length=100)
    context: dict[str, Any] = Field(default_factory=dict)


class RecommendedAction(Wire):
    action: str
    parameters: dict[str, Any]
    confidence: float
    reasoning: str


class UserContextPublic(Wire):
    lifecycle_stage: str
    activation_score: float
    engagement_score: float
    risk_level: str


class RecommendResponse(Wire):
    user_id: str
    domain: str | None
    decision_id: str            # extension: the logged decision (docs/decisions.md, "The decision log")
    propensity: float           # extension: the probability the policy picked this action
    recommendation: RecommendedAction
    alternatives: list[RecommendedAction]
    user_context: UserContextPublic


class EvaluateRequest(Wire):
    since: datetime | None = None       # without a zone: UTC
    domain: str | None = Field(None, max_length=100)

    @field_validator("since")
    @classmethod
    def _utc(cls, value):
        return value.replace(tzinfo=timezone.utc) if value is not None and value.tzinfo is None else value


class DoublyRobust(Wire):
    estimate: float
    ci: list[float]                     # the 95 % interval [low, high]


class PolicyEstimate(Wire):
    policy: str                         # current | uniform | action:<name>
    success_rate: float | None          # null: no logged decision the policy would have made
    ci: list[float] | None              # the 95 % interval [low, high]
    decisions: int                      # logged decisions the policy would have made
    doubly_robust: DoublyRobust | None = None   # extension: absent until the learner has counts


class EvaluateResponse(Wire):
    decisions: int
    estimates: list[PolicyEstimate]


class TraceResponse(Wire):
    trace: dict[str, Any]

