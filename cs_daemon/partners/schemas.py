from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import EmailStr, Field, StrictBool, field_validator, model_validator

from ..external.schemas import NAME_RE
from ..schemas import Wire
from ..tenants.schemas import TenantPublic

PlanTier = Literal["trial", "starter", "growth", "scale"]


def _snake(value: str) -> str:
    if not NAME_RE.match(value):
        raise ValueError("must be snake_case (lowercase letters, digits and _)")
    return value


class CustomerCreate(Wire):
    name: str = Field(min_length=1, max_length=200)
    owner_email: EmailStr
    plan_tier: PlanTier = "trial"


class CustomerPublic(Wire):
    tenant_id: str
    name: str
    slug: str
    plan_tier: str
    plan_status: str
    tracked_users: int
    created_at: datetime

    @classmethod
    def of(cls, tenant) -> "CustomerPublic":
        return cls(tenant_id=tenant.id, name=tenant.name, slug=tenant.slug, plan_tier=tenant.plan_tier,
                   plan_status=tenant.plan_status, tracked_users=tenant.tracked_users,
                   created_at=tenant.created_at)


class ProvisionedTenant(TenantPublic):
    """The new tenant as the interface's Tenant object, with the customer list's
    `tenant_id` and `tracked_users` beside it (docs/partners.md)."""

    tenant_id: str
    tracked_users: int

    @classmethod
    def of(cls, tenant, config: dict | None) -> "ProvisionedTenant":
        """`config` as settings show it (tenants.service.shown_config: no secret)."""
        return cls.model_validate({**TenantPublic.model_validate(tenant).model_dump(), "config": config,
                                   "tenant_id": tenant.id, "tracked_users": tenant.tracked_users})


class CustomerProvisioned(Wire):
    tenant: ProvisionedTenant
    api_key: str = Field(description="The new tenant's admin `full` key; shown once")


class CustomerList(Wire):
    customers: list[CustomerPublic]


class CustomerResponse(Wire):
    customer: CustomerPublic


class Stats(Wire):
    tracked_users: int
    events_30d: int
    interventions_30d: int
    delivered_30d: int
    positive_outcome_rate: float


class StatsResponse(Wire):
    stats: Stats


class OverallStats(Stats):
    customers: int


class OverallStatsResponse(Wire):
    stats: OverallStats


class IntegrationActionType(Wire):
    """An action type of an integration: the create fields of an action type (decisions
    §10) less the secret, which each tenant gets when it connects. `provider` and
    `domain`, when not given, come from the integration (its id and its domain), as for
    the built-in templates."""

    name: str = Field(min_length=1, max_length=100)
    description: str = Field(min_length=1, max_length=5000)
    provider: str | None = Field(None, min_length=1, max_length=100)
    domain: str | None = Field(None, min_length=1, max_length=100)
    parameters_schema: dict[str, Any]
    delivery_webhook: str = Field(min_length=1, max_length=2000,
                                  description="URL; may hold {credential_field} placeholders")
    estimated_cost_usd: str | None = Field(None, max_length=32, pattern=r"^\d+(\.\d+)?$")

    _name = field_validator("name")(_snake)


class IntegrationCreate(Wire):
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(min_length=1, max_length=5000)
    domain: str = Field(min_length=1, max_length=100)
    credential_fields: list[str] = Field(default_factory=list, max_length=20)
    action_types: list[IntegrationActionType] = Field(min_length=1, max_length=50)

    @field_validator("credential_fields")
    @classmethod
    def _fields(cls, value: list[str]) -> list[str]:
        for name in value:
            _snake(name)
        if len(set(value)) != len(value):
            raise ValueError("must not repeat a name")
        return value


class IntegrationPublic(Wire):
    id: str
    name: str
    description: str
    domain: str
    credential_fields: list[str]
    action_types: list[IntegrationActionType]
    shared_with: list[str]
    created_at: datetime


class IntegrationResponse(Wire):
    integration: IntegrationPublic


class IntegrationList(Wire):
    integrations: list[IntegrationPublic]


class ShareBody(Wire):
    tenant_ids: list[str] | None = Field(None, min_length=1, max_length=1000)
    all: StrictBool = False

    @model_validator(mode="after")
    def _one_target(self) -> "ShareBody":
        if (self.tenant_ids is None) == (not self.all):
            raise ValueError("give either tenant_ids or all: true")
        return self


class Shared(Wire):
    shared: int
