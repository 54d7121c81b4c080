from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, StrictBool

from ..schemas import Wire

Role = Literal["admin", "editor", "viewer"]
Permission = Literal["full", "manage", "ingest", "decide", "read", "partner"]


class TenantPublic(Wire):
    id: str
    name: str
    slug: str | None
    config: dict[str, Any] | None
    plan_tier: str
    plan_status: str
    tracked_user_limit: int | None
    kill_switch_active: bool
    shadow_mode: bool
    partner: bool = False
    created_at: datetime


class BrandContext(Wire):
    product_description: str | None = None
    tone_guidelines: str | None = None
    things_to_mention: list[str] | None = None
    things_to_avoid: list[str] | None = None


class ApiKeyPublic(Wire):
    id: str
    prefix: str
    label: str | None
    role: str
    scope: dict[str, Any] | None
    test: bool
    created_by: str | None = None
    last_used_at: datetime | None
    created_at: datetime
    revoked_at: datetime | None = None

    @classmethod
    def of(cls, key) -> "ApiKeyPublic":
        return cls(
            id=key.id, prefix=key.prefix, label=key.label, role=key.role,
            scope={"permissions": list(key.permissions)}, test=key.test, created_by=key.created_by,
            last_used_at=key.last_used_at, created_at=key.created_at, revoked_at=key.revoked_at,
        )


class SettingsPublic(Wire):
    tenant: TenantPublic
    brand_context: BrandContext | None
    api_keys: list[ApiKeyPublic]


class SettingsUpdate(Wire):
    name: str | None = Field(None, min_length=1, max_length=200)
    config: dict[str, Any] | None = None
    approvalMode: Literal["suggest_only", "semi_auto", "full_auto"] | None = None
    # request booleans are JSON booleans: "yes", "true" or 1 is a 400 (docs/api.md, "Errors")
    onboardingCompleted: StrictBool | None = None


class SettingsUpdated(Wire):
    name: str
    config: dict[str, Any] | None


class Updated(Wire):
    updated: bool


class FlagUpdate(Wire):
    active: StrictBool


class KillSwitchState(Wire):
    kill_switch_active: bool


class ShadowModeState(Wire):
    shadow_mode: bool
    shadow_mode_expires_at: datetime | None = None


class ApiKeyCreate(Wire):
    label: str | None = Field(None, max_length=200)
    role: Role = "viewer"
    permissions: list[Permission] = Field(default_factory=lambda: ["read"], min_length=1)
    test: StrictBool = False


class ApiKeyIssued(Wire):
    id: str
    api_key: str
    prefix: str
    label: str | None
    role: str
    scope: dict[str, Any]
    test: bool
    created_by: str | None
    created_at: datetime


class Revoked(Wire):
    revoked: bool
