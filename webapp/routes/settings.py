"""Settings: tenant, brand context, kill switch, shadow mode and API keys."""

from __future__ import annotations

from cs_daemon.auth import service as keys
from cs_daemon.tenants import service as tenants
from cs_daemon.tenants.schemas import (
    ApiKeyCreate, ApiKeyIssued, ApiKeyPublic, BrandContext, FlagUpdate,
    KillSwitchState, Revoked, SettingsPublic, SettingsUpdate, SettingsUpdated,
    ShadowModeState, TenantPublic, Updated,
)

from ..api import Api, Call

api = Api("Settings")


@api.route("GET", "/api/settings", access="read", response=SettingsPublic, errors=(404,),
           summary="The tenant, its brand context and its active API keys")
def get_settings(call: Call):
    tenant = tenants.get(call.session, call.tenant_id, now=call.now)
    return SettingsPublic(
        tenant=TenantPublic.model_validate(tenant).model_copy(update={"config": tenants.shown_config(tenant)}),
        brand_context=BrandContext.model_validate(tenant.brand_context) if tenant.brand_context else None,
        api_keys=[ApiKeyPublic.of(k) for k in keys.list_keys(call.session)],
    )


@api.route("PATCH", "/api/settings", access="write", configures=True, body=SettingsUpdate,
           response=SettingsUpdated, errors=(400, 404), summary="Rename the tenant and merge keys into its config")
def patch_settings(call: Call):
    data: SettingsUpdate = call.body
    settings = call.rt.settings
    tenant = tenants.update_settings(
        call.session, call.tenant_id, now=call.now, name=data.name, config=data.config,
        approval_mode=data.approvalMode, onboarding_completed=data.onboardingCompleted,
        secret_key=settings.secret_key, allow_private=settings.private_webhook_urls_allowed,
    )
    return SettingsUpdated(name=tenant.name, config=tenants.shown_config(tenant))


@api.route("PATCH", "/api/settings/brand", access="write", configures=True, body=BrandContext,
           response=Updated, errors=(400, 404), summary="Upsert the brand context used in messages")
def patch_brand(call: Call):
    fields = call.body.model_dump(exclude_unset=True)
    tenants.update_brand(call.session, call.tenant_id, now=call.now, fields=fields)
    return Updated(updated=True)


@api.route("PUT", "/api/settings/kill-switch", access="admin", configures=True, body=FlagUpdate,
           response=KillSwitchState, errors=(400, 404),
           summary="Stop (or resume) everything leaving the service for this tenant")
def put_kill_switch(call: Call):
    tenant = tenants.set_kill_switch(call.session, call.tenant_id, call.body.active, now=call.now)
    return KillSwitchState(kill_switch_active=tenant.kill_switch_active)


@api.route("PUT", "/api/settings/shadow-mode", access="admin", configures=True, body=FlagUpdate,
           response=ShadowModeState, errors=(400, 404),
           summary="Record decisions without delivering them; switches itself off after 72 hours")
def put_shadow_mode(call: Call):
    tenant = tenants.set_shadow_mode(call.session, call.tenant_id, call.body.active, now=call.now)
    return ShadowModeState(shadow_mode=tenant.shadow_mode,
                           shadow_mode_expires_at=tenant.config.get("shadow_mode_expires_at"))


@api.route("POST", "/api/settings/api-keys", access="admin", body=ApiKeyCreate,
           response=ApiKeyIssued, status=201, errors=(400,),
           summary="Issue an API key (the secret is shown once)")
def post_api_key(call: Call):
    data: ApiKeyCreate = call.body
    issued = keys.mint(call.session, call.caller, role=data.role, permissions=list(data.permissions),
                       test=data.test, label=data.label, now=call.now)
    k = issued.key
    return ApiKeyIssued(id=k.id, api_key=issued.secret, prefix=k.prefix, label=k.label, role=k.role,
                        scope={"permissions": k.permissions}, test=k.test, created_by=k.created_by,
                        created_at=k.created_at)


@api.route("DELETE", "/api/settings/api-keys/{key_id}", access="admin", response=Revoked,
           errors=(404,), summary="Revoke an API key")
def delete_api_key(call: Call, key_id: str):
    keys.revoke(call.session, key_id, now=call.now)
    return Revoked(revoked=True)
