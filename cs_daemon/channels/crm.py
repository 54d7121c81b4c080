"""The CRM channel (docs/tenant-config.md, "The CRM channel"): a signed POST of the
intervention and its customer to the tenant's `config.crm_webhook_url`, signed with
`config.crm_webhook_secret`, read at send time (the delivery keeps the reference
`ref:crm`, never the secret). A rollback of work that was sent posts
`intervention.rolled_back` the same way; test-mode work never reaches the CRM.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from ..customers import fields
from ..customers.models import Customer
from ..db import new_id
from ..delivery import service as delivery
from ..integrations.http import Outcome
from ..interventions.models import Intervention
from ..tenants import service as tenants
from ..tenants.models import Tenant
from ..uow import uow_of
from . import webhook
from .base import Planned, Undeliverable
from .payload import customer_of

NAME = "crm"
SECRET_REF = f"ref:{NAME}"     # the secret is read at send time (`secret`)
FIELDS = ("id", *(f for f in fields.ALL if f != "last_activity_at"))     # of the customer


def crm_body(event: str, iv: Intervention, customer: Customer | None) -> dict:
    return {"event": event,
            "intervention": {"id": iv.id, "user_id": iv.user_id, "playbook_id": iv.playbook_id, "channel": iv.channel,
                             "status": iv.status, "message_body": iv.message_body, "reasoning": iv.reasoning,
                             "confidence": iv.confidence},
            "customer": {f: getattr(customer, f) for f in FIELDS} if customer else {"id": iv.user_id}}


def url_of(session: Session, tenant_id: str) -> str | None:
    return tenants.config_of(session.get(Tenant, tenant_id)).crm_webhook_url


def secret(session: Session, tenant_id: str) -> str:
    """Read at send time, decrypted from where it is kept (docs/tenant-config.md, "The CRM channel")."""
    found = tenants.crm_secret(session.get(Tenant, tenant_id), uow_of(session).settings.secret_key)
    if not found:
        raise LookupError("config.crm_webhook_secret is not set")
    return found


class Crm:
    name = NAME
    delivered_on_attempt = True

    def deliveries_for(self, session: Session, iv: Intervention) -> list[Planned]:
        url = url_of(session, iv.tenant_id)
        if not url:
            raise Undeliverable("config.crm_webhook_url is not set")
        return [Planned(url=url, body=crm_body("intervention.delivered", iv, customer_of(session, iv)),
                        secret_enc=SECRET_REF)]

    def send(self, claimed: delivery.Claimed, secret: str, rt, now: datetime) -> Outcome:
        return webhook.post(rt, claimed, secret, now)

    def withdraw(self, session: Session, iv: Intervention, *, was: str, now: datetime) -> None:
        if was not in ("sent", "delivered") or iv.test:
            return
        url = url_of(session, iv.tenant_id)
        if url:
            delivery.create(session, iv.tenant_id, kind="event", channel=NAME, url=url,
                            body=crm_body("intervention.rolled_back", iv, customer_of(session, iv)),
                            secret_enc=SECRET_REF, event_type="intervention.rolled_back", subject_id=iv.id, now=now,
                            # an event of its own: the message's id would have it dropped by a
                            # receiver deduplicating on it, as docs/webhooks.md says to
                            headers={"X-Service-Event-Id": new_id()})


CHANNEL = Crm()
