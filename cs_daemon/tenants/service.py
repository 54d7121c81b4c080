"""Tenants and their settings: creation with an owner, config, brand context and the two
safety flags (kill switch, shadow mode)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from .. import crypto, plans
from ..auth import service as auth
from ..db import locked, new_id, write_lock
from ..errors import NotFound, ValidationFailed
from ..integrations import netguard
from ..team.models import Member
from . import config as tenant_config
from .models import Tenant

SHADOW_MODE_DURATION = timedelta(hours=72)
APPROVAL_MODES = tenant_config.APPROVAL_MODES


def locked_for_limits(session: Session, tenant_id: str) -> Tenant:
    """The tenant, locked until commit, to count something against its plan: a count
    made under the lock stays true until the new row is written, so concurrent requests
    at the limit never pass it together (docs/api.md, "Concurrent changes")."""
    return locked(session, Tenant, tenant_id)


@dataclass(frozen=True)
class CreatedTenant:
    tenant: Tenant
    owner: Member
    key: auth.IssuedKey


def create(
    session: Session,
    *,
    name: str,
    owner_email: str,
    now: datetime,
    owner_name: str | None = None,
    plan_tier: str = "trial",
    partner: bool = False,
    partner_tenant_id: str | None = None,
    tenant_id: str | None = None,
) -> CreatedTenant:
    """A tenant, its first admin member and that member's admin `full` key."""
    name = name.strip()
    if not name:
        raise ValidationFailed("name must not be empty", [{"field": "name", "message": "must not be empty"}])
    if plan_tier not in plans.TIERS:
        raise ValidationFailed(
            f"unknown plan {plan_tier!r}",
            [{"field": "plan_tier", "message": f"must be one of {', '.join(plans.TIERS)}"}],
        )
    tenant = Tenant(
        id=tenant_id or new_id(),
        name=name,
        slug=_unique_slug(session, name),
        plan_tier=plan_tier,
        plan_status="trialing" if plan_tier == "trial" else "active",
        tracked_user_limit=plans.plan(plan_tier).tracked_users,
        partner=partner,
        partner_tenant_id=partner_tenant_id,
        config={},
        created_at=now,
    )
    session.add(tenant)
    session.flush()
    owner = Member(tenant_id=tenant.id, email=owner_email, name=owner_name, role="admin", created_at=now)
    session.add(owner)
    session.flush()
    key = auth.issue(
        session, tenant.id, role="admin", permissions=["full"], now=now,
        label="owner", member_id=owner.id,
    )
    return CreatedTenant(tenant, owner, key)


def _unique_slug(session: Session, name: str) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:60] or "tenant"
    taken = set(
        session.scalars(select(Tenant.slug).where(Tenant.slug.like(f"{base}%")))
    )
    slug, n = base, 1
    while slug in taken:
        n += 1
        slug = f"{base}-{n}"
    return slug


def get(session: Session, tenant_id: str, *, now: datetime) -> Tenant:
    """The tenant, with an expired shadow mode switched off on the way."""
    tenant = session.get(Tenant, tenant_id)
    if tenant is None:
        raise NotFound("tenant not found")
    if tenant.shadow_mode:
        expire_shadow_mode(tenant, now)
    return tenant


def find(session: Session, id_or_slug: str) -> Tenant | None:
    """The tenant with this id, else the one with this slug (an unscoped session)."""
    tenant = session.get(Tenant, id_or_slug) if len(id_or_slug) <= 36 else None
    if tenant is None:
        tenant = session.scalars(select(Tenant).where(Tenant.slug == id_or_slug)).first()
    return tenant


def expire_shadow_mode(tenant: Tenant, now: datetime) -> bool:
    """Switch shadow mode off once its 72 hours are over; True when it did. An expiry
    that cannot be read keeps shadow mode on (nothing is sent by mistake; cs doctor
    reports it)."""
    expires = tenant_config.read(tenant.config).shadow_mode_expires
    if tenant.shadow_mode and expires is not None and expires <= now:
        _set_shadow(tenant, False, now)
        return True
    return False


def config_of(tenant: Tenant) -> tenant_config.TenantConfig:
    """The tenant's config, typed; values stored invalid take their defaults."""
    return tenant_config.read(tenant.config)


def shown_config(tenant: Tenant) -> dict:
    return tenant_config.shown(tenant.config, secret_set=bool(tenant.crm_webhook_secret_enc))


def list_all(session: Session) -> list[Tenant]:
    return list(session.scalars(select(Tenant).order_by(Tenant.created_at)))


def count(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Tenant)) or 0


def _for_change(session: Session, tenant_id: str, now: datetime) -> Tenant:
    """The tenant read as committed, its row locked until commit: concurrent changes of
    its settings take turns, each merging into what the one before wrote (read unlocked,
    two PATCHes of different keys kept one, and shadow mode lost its end). FOR NO KEY
    UPDATE: ingest's foreign-key checks on the row go on meanwhile."""
    write_lock(session)
    tenant = session.get(Tenant, tenant_id, with_for_update={"key_share": True}, populate_existing=True)
    if tenant is None:
        raise NotFound("tenant not found")
    if tenant.shadow_mode:
        expire_shadow_mode(tenant, now)
    return tenant


def update_settings(
    session: Session,
    tenant_id: str,
    *,
    now: datetime,
    name: str | None = None,
    config: dict | None = None,
    approval_mode: str | None = None,
    onboarding_completed: bool | None = None,
    secret_key: str | None = None,
    allow_private: bool = False,
) -> Tenant:
    """Rename and merge config keys (a key set to null is removed). The merged config
    must validate (docs/tenant-config.md); the CRM secret is kept encrypted apart, and
    a new CRM URL passes the webhook URL policy."""
    tenant = _for_change(session, tenant_id, now)
    if name is not None:
        tenant.name = name
    incoming = {k: v for k, v in (config or {}).items() if k not in tenant_config.SHOWN_ONLY}
    merged = dict(tenant.config or {})
    _refuse_own_endpoint_keys(incoming, merged)
    for key, value in incoming.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    if approval_mode is not None:
        merged["approvalMode"] = approval_mode
    if onboarding_completed is not None:
        merged["onboardingCompleted"] = onboarding_completed
    typed = tenant_config.check(merged)
    secret = merged.pop("crm_webhook_secret", None)       # never stored in the config
    secret_changed = "crm_webhook_secret" in incoming or secret is not None
    if typed.crm_webhook_url and not (secret or (tenant.crm_webhook_secret_enc and not secret_changed)):
        raise ValidationFailed("invalid settings: config.crm_webhook_secret is required with crm_webhook_url",
                               [{"field": "config.crm_webhook_secret", "message": "is required with crm_webhook_url"}])
    if "crm_webhook_url" in incoming and typed.crm_webhook_url:
        _check_crm_url(typed.crm_webhook_url, allow_private=allow_private)
    if secret_changed:
        if secret is not None and secret_key is None:
            raise RuntimeError("storing the CRM secret needs the secret key")
        tenant.crm_webhook_secret_enc = crypto.encrypt(secret_key, secret) if secret is not None else None
    if _milestones(merged) != _milestones(tenant.config):
        tenant.milestones_changed_at = now   # the score sweep re-reads every user's (customers/milestones.py)
    tenant.config = merged
    return tenant


def _refuse_own_endpoint_keys(incoming: dict, stored: dict) -> None:
    """A config key that its own endpoint sets (shadow mode's end, admin only and 72 hours
    after it was turned on) is not changed through PATCH: sent as stored it is a no-op,
    otherwise 400 (docs/tenant-config.md)."""
    for key, endpoint in tenant_config.SET_BY_ENDPOINT.items():
        if key in incoming and incoming[key] != stored.get(key):
            raise ValidationFailed(f"invalid settings: config.{key} is set by {endpoint}",
                                   [{"field": f"config.{key}", "message": f"is set by {endpoint}"}])


def _milestones(config: dict | None) -> set:
    value = (config or {}).get("milestones")
    return set(value) if isinstance(value, list) else set()


def _check_crm_url(url: str, *, allow_private: bool) -> None:
    """https, or http where private URLs are allowed; and the webhook URL policy
    (integrations/netguard.py), as for webhook endpoints."""
    try:
        if not url.startswith("https://") and not allow_private:
            raise netguard.UrlRefused("must be an https:// URL")
        netguard.check(url, allow_private=allow_private)
    except netguard.UrlRefused as exc:
        raise ValidationFailed(f"invalid settings: config.crm_webhook_url: {exc}",
                               [{"field": "config.crm_webhook_url", "message": str(exc)}]) from None


def crm_secret(tenant: Tenant, secret_key: str) -> str | None:
    """The CRM signing secret, decrypted; None when none is set."""
    if not tenant.crm_webhook_secret_enc:
        return None
    return crypto.decrypt(secret_key, tenant.crm_webhook_secret_enc)


def update_brand(session: Session, tenant_id: str, *, now: datetime, fields: dict) -> Tenant:
    """Upsert the brand context: given fields replace, others stay."""
    tenant = _for_change(session, tenant_id, now)
    tenant.brand_context = {**(tenant.brand_context or {}), **fields}
    return tenant


def set_kill_switch(session: Session, tenant_id: str, active: bool, *, now: datetime) -> Tenant:
    tenant = _for_change(session, tenant_id, now)
    tenant.kill_switch_active = active
    return tenant


def set_partner(session: Session, tenant_id: str, active: bool, *, now: datetime) -> Tenant:
    tenant = _for_change(session, tenant_id, now)
    tenant.partner = active
    return tenant


def set_shadow_mode(session: Session, tenant_id: str, active: bool, *, now: datetime) -> Tenant:
    tenant = _for_change(session, tenant_id, now)
    _set_shadow(tenant, active, now)
    return tenant


def _set_shadow(tenant: Tenant, active: bool, now: datetime) -> None:
    config = dict(tenant.config or {})
    if active:
        config["shadow_mode_expires_at"] = (now + SHADOW_MODE_DURATION).isoformat()
    else:
        config.pop("shadow_mode_expires_at", None)
    tenant.shadow_mode = active
    tenant.config = config


def set_plan(tenant: Tenant, plan_tier: str, plan_status: str) -> None:
    """Move the tenant to a plan; its limits follow the tier (docs/api.md, "Plans")."""
    if plan_tier not in plans.TIERS or plan_status not in plans.STATUSES:
        raise ValueError(f"unknown plan {plan_tier!r} or status {plan_status!r}")
    tenant.plan_tier = plan_tier
    tenant.plan_status = plan_status
    tenant.tracked_user_limit = plans.plan(plan_tier).tracked_users
