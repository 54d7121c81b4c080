"""Pre-built platform connectors (docs/external-actions.md, "Platforms"): three templates whose action types are
registered when a tenant connects, with the credentials it gives (kept encrypted, and read
only when a dispatch is sent: external/credentials.py); partner integrations shared with
the tenant (docs/partners.md) are listed and connect the same way."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..errors import Conflict, NotFound, ValidationFailed
from ..partners import integrations
from . import credentials as credentials_
from . import service
from .models import ActionType, PlatformConnection
from .templates import Template


def _obj(props: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


TEMPLATES = {t.id: t for t in (
    Template("loyalty", "Loyalty platform", "Points, tiers and rewards for your users.", "loyalty",
             ("base_url", "api_key"), (
                 {"name": "award_points", "description": "Award loyalty points to the user.",
                  "parameters_schema": _obj({"points": {"type": "integer", "minimum": 1},
                                             "reason": {"type": "string"}}, ["points"]),
                  "delivery_webhook": "{base_url}/hooks/award-points", "estimated_cost_usd": "0.01"},
                 {"name": "grant_reward", "description": "Grant a reward (coupon, perk) to the user.",
                  "parameters_schema": _obj({"reward_id": {"type": "string"}}, ["reward_id"]),
                  "delivery_webhook": "{base_url}/hooks/grant-reward", "estimated_cost_usd": "0.50"},
             )),
    Template("support_desk", "Support desk", "Open and prioritise tickets for your support team.", "support",
             ("base_url", "api_token"), (
                 {"name": "open_ticket", "description": "Open a support ticket about the user.",
                  "parameters_schema": _obj({"subject": {"type": "string", "minLength": 1},
                                             "priority": {"enum": ["low", "normal", "high", "urgent"]}},
                                            ["subject"]),
                  "delivery_webhook": "{base_url}/api/tickets"},
             )),
    Template("team_chat", "Team chat", "Post alerts about users into a team channel.", "collaboration",
             ("webhook_url",), (
                 {"name": "post_message", "description": "Post a message about the user in the team channel.",
                  "parameters_schema": _obj({"text": {"type": "string", "minLength": 1}}, ["text"]),
                  "delivery_webhook": "{webhook_url}"},
             )),
)}


def describe(session: Session, template: Template) -> dict:
    conn = credentials_.connection(session, template.id)
    connected = bool(conn and conn.connected)
    names = [a["name"] for a in template.action_types]
    return {"id": template.id, "name": template.name, "description": template.description, "domain": template.domain,
            "credential_fields": list(template.credential_fields), "connected": connected,
            "connected_at": conn.connected_at if connected else None, "action_types": names}


def list_platforms(session: Session) -> list[dict]:
    return [describe(session, t) for t in (*TEMPLATES.values(), *integrations.shared_templates(session))]


def _template(session: Session, platform_id: str) -> Template:
    """A built-in template, or a partner integration shared with this tenant."""
    found = TEMPLATES.get(platform_id) or integrations.shared_template(session, platform_id)
    if found is None:
        raise NotFound("platform not found")
    return found


def connect(session: Session, tenant_id: str, platform_id: str, credentials: dict, *, now: datetime,
            secret_key: str, allow_private: bool) -> tuple[dict, dict[str, str]]:
    """The platform as listed, and the `webhook_secret` of each action type this connect
    registered (shown this once, as a registration shows it; a type kept from an earlier
    connect keeps its secret, not shown again)."""
    template = _template(session, platform_id)
    missing = [f for f in template.credential_fields if not isinstance(credentials.get(f), str) or not credentials[f]]
    if missing:
        raise ValidationFailed(f"missing credentials: {', '.join(missing)}",
                               [{"field": f"credentials.{f}", "message": "is required"} for f in missing])
    taken = [spec["name"] for spec in template.action_types
             if (other := service.find_type(session, spec["name"])) is not None and other.platform_id != template.id]
    if taken:   # another's type of that name stays as it is: refused before anything changes
        raise Conflict(f"action types named {', '.join(map(repr, taken))} exist and are not {template.id}'s: "
                       "rename or delete them first")
    conn = credentials_.connection(session, platform_id) or PlatformConnection(
        tenant_id=tenant_id, platform_id=platform_id, credentials_enc="")
    credentials_.store(conn, credentials, secret_key=secret_key)
    conn.connected, conn.connected_at, conn.disconnected_at = True, now, None
    session.add(conn)
    secrets: dict[str, str] = {}
    for spec in template.action_types:
        # the URL stays the template's: the credentials fill it at dispatch, not here
        fields = {**spec, "provider": spec.get("provider") or template.id,
                  "domain": spec.get("domain") or template.domain}
        existing = service.find_type(session, fields["name"])
        if existing is None:
            _, secrets[fields["name"]] = service.create_type(
                session, tenant_id, fields, now=now, secret_key=secret_key, allow_private=allow_private,
                platform_id=template.id, credentials=credentials)
        else:
            service.update_type(session, existing.id, fields, now=now, allow_private=allow_private,
                                credentials=credentials)
            existing.active, existing.platform_id = True, template.id
    session.flush()
    return describe(session, template), secrets


def disconnect(session: Session, platform_id: str, *, now: datetime) -> dict:
    template = _template(session, platform_id)
    conn = credentials_.connection(session, platform_id)
    if conn is not None and conn.connected:
        conn.connected, conn.disconnected_at = False, now
        for action_type in session.scalars(select(ActionType).where(ActionType.platform_id == template.id)):
            action_type.active, action_type.updated_at = False, now
    session.flush()
    return describe(session, template)
