"""Integrations a partner publishes: registration (validated like action types), sharing
with its own customer tenants, and the templates a customer's platform listing shows."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..errors import Conflict, NotFound, ValidationFailed
from ..external import service as external
from ..external.credentials import PLACEHOLDER
from ..external.templates import Template
from ..integrations import netguard
from . import service as partners
from .models import IntegrationShare, PartnerIntegration


def register(session: Session, partner_id: str, fields: dict, *, now: datetime,
             allow_private: bool) -> PartnerIntegration:
    _check_action_types(fields["action_types"], fields["credential_fields"], allow_private)
    if _find(session, partner_id, fields["name"]) is not None:
        raise Conflict(f"an integration named {fields['name']!r} already exists")
    integration = PartnerIntegration(partner_tenant_id=partner_id, created_at=now, **fields)
    session.add(integration)
    try:
        session.flush()
    except IntegrityError:
        raise Conflict(f"an integration named {fields['name']!r} already exists") from None
    return integration


def _check_action_types(types: list[dict], credential_fields: list[str], allow_private: bool) -> None:
    details: list[dict] = []
    seen: set[str] = set()
    for i, spec in enumerate(types):
        where = f"action_types[{i}]"
        if spec["name"] in seen:
            details.append({"field": f"{where}.name", "message": "repeats the name of another action type"})
        seen.add(spec["name"])
        try:
            external.check_schema(spec["parameters_schema"])
        except ValidationFailed as exc:
            details += [{"field": f"{where}.parameters_schema", "message": d["message"]} for d in exc.extra["details"]]
        problem = _webhook_problem(spec["delivery_webhook"], credential_fields, allow_private)
        if problem:
            details.append({"field": f"{where}.delivery_webhook", "message": problem})
    if details:
        first = details[0]
        raise ValidationFailed(f"invalid integration: {first['field']}: {first['message']}", details)


def _webhook_problem(url: str, credential_fields: list[str], allow_private: bool) -> str | None:
    """A URL with {credential} placeholders is complete, and checked, only when a tenant
    connects; a fixed URL is checked against the outbound policy now."""
    names = PLACEHOLDER.findall(url)
    unknown = [n for n in names if n not in credential_fields]
    if unknown:
        return f"placeholder {{{unknown[0]}}} is not one of the credential_fields"
    if "{" in PLACEHOLDER.sub("", url) or "}" in PLACEHOLDER.sub("", url):
        return "has an unmatched brace"
    if names:
        return None
    try:
        netguard.check(url, allow_private=allow_private)
    except netguard.UrlRefused as exc:
        return f"refused: {exc}"
    return None


def _find(session: Session, partner_id: str, name: str) -> PartnerIntegration | None:
    return session.scalars(select(PartnerIntegration).where(PartnerIntegration.partner_tenant_id == partner_id,
                                                            PartnerIntegration.name == name)).first()


def list_for_partner(session: Session, partner_id: str) -> list[PartnerIntegration]:
    return list(session.scalars(select(PartnerIntegration).where(PartnerIntegration.partner_tenant_id == partner_id)
                                .order_by(PartnerIntegration.created_at, PartnerIntegration.id)))


def get_for_partner(session: Session, partner_id: str, integration_id: str) -> PartnerIntegration:
    found = session.get(PartnerIntegration, integration_id)
    if found is None or found.partner_tenant_id != partner_id:
        raise NotFound("integration not found")
    return found


def share(session: Session, partner_id: str, integration_id: str, *, tenant_ids: list[str] | None,
          now: datetime) -> int:
    """Share with the named customers (all of them when `tenant_ids` is None); already
    shared ones stay shared. Any id that is not this partner's customer: 404, nothing shared."""
    integration = get_for_partner(session, partner_id, integration_id)
    if tenant_ids is None:
        targets = [t.id for t in partners.list_customers(session, partner_id)]
    else:
        targets = list(dict.fromkeys(tenant_ids))
        for tenant_id in targets:
            partners.owned_customer(session, partner_id, tenant_id)
    for tenant_id in targets:
        with partners.customer_session(session, partner_id, tenant_id) as scoped:
            if _share_row(scoped, integration.id) is None:
                scoped.add(IntegrationShare(tenant_id=tenant_id, integration_id=integration.id, shared_at=now))
    return len(targets)


def _share_row(scoped: Session, integration_id: str) -> IntegrationShare | None:
    return scoped.scalars(select(IntegrationShare).where(IntegrationShare.integration_id == integration_id)).first()


def shared_with(session: Session, partner_id: str) -> dict[str, list[str]]:
    """integration id → the customer tenants it is shared with (read in each one's scope)."""
    found: dict[str, list[str]] = {}
    for customer in partners.list_customers(session, partner_id):
        with partners.customer_session(session, partner_id, customer.id) as scoped:
            for integration_id in scoped.scalars(select(IntegrationShare.integration_id)):
                found.setdefault(integration_id, []).append(customer.id)
    return found


# --- what a customer tenant sees (its own session) -------------------------------------


def as_template(integration: PartnerIntegration) -> Template:
    return Template(integration.id, integration.name, integration.description, integration.domain,
                    tuple(integration.credential_fields), tuple(integration.action_types))


def shared_templates(session: Session) -> list[Template]:
    """The integrations shared with the session's tenant (its share rows are tenant-owned)."""
    rows = session.scalars(select(PartnerIntegration)
                           .join(IntegrationShare, IntegrationShare.integration_id == PartnerIntegration.id)
                           .order_by(IntegrationShare.shared_at, PartnerIntegration.name))
    return [as_template(i) for i in rows]


def shared_template(session: Session, integration_id: str) -> Template | None:
    row = session.scalars(select(PartnerIntegration)
                          .join(IntegrationShare, IntegrationShare.integration_id == PartnerIntegration.id)
                          .where(PartnerIntegration.id == integration_id)).first()
    return as_template(row) if row is not None else None
