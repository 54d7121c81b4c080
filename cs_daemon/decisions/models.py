from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Float, Index, Integer, Text, text
from sqlmodel import Field

from ..db import TenantOwned, id_field, json_field, time_field


class DecisionRequest(TenantOwned, table=True):
    """A decision owed to a user after new events: written with the events, so a lost job
    message delays the decision and never loses it."""

    __tablename__ = "decision_requests"
    __table_args__ = (Index("ix_decision_requests_open", "done_at", "created_at"),)

    id: str = id_field()
    user_id: str = Field(max_length=255)
    events: list = json_field(default=[], nullable=False)
    state_changed: bool = False
    test: bool = False      # the events were tracked with a test key: what is decided is test data
    created_at: datetime = time_field(nullable=False)
    claimed_until: datetime | None = time_field()   # leased until; after a failed try, not before
    done_at: datetime | None = time_field()
    # tries so far (each claim counts one); past requests.MAX_ATTEMPTS the request is
    # `failed` (failed_at set) and left alone, with the last error kept
    attempts: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default=text("0")))
    failed_at: datetime | None = time_field()
    last_error: str | None = Field(default=None, max_length=500)


class DecisionTrace(TenantOwned, table=True):
    """Everything one decision used and produced, kept for `config.trace_retention_days`
    (docs/decisions.md, "The decision trace"): an engine decision (also one that ended in
    no action, a held-out or a shadow one) or a recommendation. Its id is the decision's
    `decision_id`."""

    __tablename__ = "decision_traces"
    __table_args__ = (
        Index("ix_decision_traces_intervention", "tenant_id", "intervention_id"),
        Index("ix_decision_traces_user", "tenant_id", "user_id", "created_at"),
        Index("ix_decision_traces_created", "tenant_id", "created_at"),
    )

    id: str = id_field()
    user_id: str = Field(max_length=255)
    kind: str = Field(max_length=10)                 # engine | recommend
    decided_by: str = Field(max_length=8)            # agent | learner | rules
    action: str = Field(max_length=100)              # send | escalate | external_action | none; recommend: the action
    reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))  # why none
    playbook_id: str | None = Field(default=None, max_length=36)
    channel: str | None = Field(default=None, max_length=20)
    features: dict = json_field(default={}, nullable=False)
    rules: list = json_field(default=[], nullable=False)
    options: list = json_field(default=[], nullable=False)
    propensity: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    agent: dict = json_field(default={}, nullable=False)         # {steps, fallback_reason}
    fallback_reason: str | None = Field(default=None, max_length=200)   # the agent's, for counting
    drafts: list = json_field(default=[], nullable=False)
    choice: dict = json_field(default={}, nullable=False)
    tokens: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default=text("0")))
    intervention_id: str | None = Field(default=None, max_length=36)
    external_action_id: str | None = Field(default=None, max_length=36)
    test: bool = False
    created_at: datetime = time_field(nullable=False)
