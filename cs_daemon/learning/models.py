from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Float, Index, Integer, String
from sqlmodel import Field

from ..db import TenantOwned, id_field, json_field, time_field


class DecisionLog(TenantOwned, table=True):
    """One choice the learner (or the rules) made: what it knew and what it picked, joined
    to its outcome through the intervention or the external action it led to
    (docs/decisions.md, "The decision log")."""

    __tablename__ = "decision_log"
    __table_args__ = (
        Index("ix_decision_log_created", "tenant_id", "kind", "created_at"),
        Index("ix_decision_log_intervention", "tenant_id", "intervention_id"),
        Index("ix_decision_log_action", "tenant_id", "external_action_id"),
        Index("ix_decision_log_open", "tenant_id", "user_id", "choice", "created_at"),
    )

    id: str = id_field()
    kind: str = Field(max_length=12)                 # recommend | playbook | channel
    scope: str = Field(max_length=60)                # whose counts: action | playbook | channel:<playbook id>
    user_id: str = Field(max_length=255)
    domain: str | None = Field(default=None, max_length=100)
    features: dict = json_field(default={}, nullable=False)
    options: list = json_field(default=[], nullable=False)   # [{option, estimate, uncertainty, successes, trials, probability}]
    choice: str = Field(max_length=100)
    propensity: float = Field(sa_column=Column(Float, nullable=False))
    decided_by: str = Field(max_length=8)            # learner | rules
    intervention_id: str | None = Field(default=None, max_length=36)
    external_action_id: str | None = Field(default=None, max_length=36)
    decision_id: str | None = Field(default=None, max_length=36)   # the decision's trace (docs/decisions.md)
    test: bool = False
    created_at: datetime = time_field(nullable=False)
    success: bool | None = None                      # the outcome, once known
    outcome_at: datetime | None = time_field()


class DecisionCount(TenantOwned, table=True):
    """The learned state: successes and trials of an option under a key (everyone, a
    feature value, a segment), kept up to date as outcomes are recorded."""

    __tablename__ = "decision_counts"

    tenant_id: str = Field(foreign_key="tenants.id", primary_key=True, max_length=36)
    scope: str = Field(primary_key=True, max_length=60)
    option: str = Field(primary_key=True, max_length=100)
    key: str = Field(sa_column=Column(String(1400), primary_key=True))
    successes: int = Field(sa_column=Column(Integer, nullable=False))
    trials: int = Field(sa_column=Column(Integer, nullable=False))
