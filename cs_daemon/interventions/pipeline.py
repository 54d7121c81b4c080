"""The execute pipeline: approved → sent → delivered | failed, on the one durable
delivery mechanism. Approval writes the channel's deliveries in the same transaction;
the delivery listener moves the intervention's status as attempts are recorded. Paused
or rolled-back work is cancelled before it leaves; the kill switch holds every delivery
until it is turned off (the delivery mechanism's claim checks it).

Channels: `webhook` (the channel-delivery payload to each active endpoint, signed),
`crm` (config.crm_webhook_url, signed with config.crm_webhook_secret), `email`
(SMTP, `mailto:`) and `in_app` (the stream, `inapp:`); test-mode work goes to the sink.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from ..customers.models import Customer
from ..delivery import service as delivery
from ..delivery.models import Delivery
from ..integrations.http import Outcome
from ..outbox import service as outbox
from ..tenants import service as tenants
from ..tenants.models import Tenant
from ..webhooks.models import WebhookEndpoint
from ..db import locked
from . import outcomes, states
from .models import Intervention
from ..channels import email

KIND = "channel"


# the confidence of an intervention created by hand: the caller chose it (docs/api.md)
BY_HAND = 1.0


def channel_payload(iv: Intervention, customer: Customer | None) -> dict:
    """The spec's channel-delivery payload: its strings and number are never null (an
    intervention made by hand has no reasoning and the confidence of a choice)."""
    return {"intervention_id": iv.id, "user_id": iv.user_id, "playbook_id": iv.playbook_id, "channel": iv.channel,
            "message_body": iv.message_body or "", "reasoning": iv.reasoning or "",
            "confidence": BY_HAND if iv.confidence is None else iv.confidence,
            "metadata": {"lifecycle_stage": customer.lifecycle_stage if customer else None,
                         "activation_score": customer.activation_score if customer else None,
                         "risk_level": customer.risk_level if customer else None}}


def crm_body(event: str, iv: Intervention, customer: Customer | None) -> dict:
    fields = ("id", "name", "email", "company", "role", "team_size", "locale", "lifecycle_stage", "health",
              "activation_score", "engagement_score", "expansion_score", "risk_level")
    return {"event": event,
            "intervention": {"id": iv.id, "user_id": iv.user_id, "playbook_id": iv.playbook_id, "channel": iv.channel,
                             "status": iv.status, "message_body": iv.message_body, "reasoning": iv.reasoning,
                             "confidence": iv.confidence},
            "customer": {f: getattr(customer, f) for f in fields} if customer else {"id": iv.user_id}}


def start(session: Session, iv: Intervention, *, now: datetime) -> list[Delivery]:
    """Write the deliveries of an approved intervention (sent after commit)."""
    customer = session.get(Customer, (iv.tenant_id, iv.user_id))
    common = dict(kind=KIND, event_type=f"channel.{iv.channel}", subject_id=iv.id, test=iv.test, now=now,
                  headers={"X-Service-Channel": iv.channel})
    if iv.test:
        return [delivery.create(session, iv.tenant_id, url="sink:test-mode", body=channel_payload(iv, customer),
                                secret_enc="", **common)]
    if iv.channel == "webhook":
        endpoints = session.query(WebhookEndpoint).filter(WebhookEndpoint.active.is_(True)).all()
        return [delivery.create(session, iv.tenant_id, url=e.url, body=channel_payload(iv, customer),
                                secret_enc=e.secret_enc, endpoint_id=e.id, **common) for e in endpoints] or \
            [_undeliverable(session, iv, "no active webhook endpoint", now)]
    if iv.channel == "crm":
        url = _crm_url(session, iv.tenant_id)
        if not url:
            return [_undeliverable(session, iv, "config.crm_webhook_url is not set", now)]
        return [delivery.create(session, iv.tenant_id, url=url,
                                body=crm_body("intervention.delivered", iv, customer), secret_enc="ref:crm", **common)]
    if iv.channel == "email":
        if not customer or not customer.email:
            return [_undeliverable(session, iv, "the user has no email address", now)]
        return [delivery.create(session, iv.tenant_id, url=f"mailto:{customer.email}",
                                body={"intervention_id": iv.id, "user_id": iv.user_id, "name": customer.name,
                                      "message_body": iv.message_body or "",
                                      "subject": email.subject_of(session, iv.playbook_id)},
                                secret_enc="", **common)]
    return [delivery.create(session, iv.tenant_id, url=f"inapp:{iv.user_id}",
                            body=channel_payload(iv, customer), secret_enc="", **common)]


def _undeliverable(session: Session, iv: Intervention, why: str, now: datetime) -> Delivery:
    """A delivery that cannot even be tried fails at once, visibly, with its reason."""
    made = delivery.create(session, iv.tenant_id, kind=KIND, url="none:", body={"intervention_id": iv.id},
                           secret_enc="", event_type=f"channel.{iv.channel}", subject_id=iv.id, test=iv.test,
                           now=now, enqueue=False, max_attempts=1)
    made.status, made.next_attempt_at, made.attempts = "failed", None, 0
    _failed(session, iv, why, now)
    return made


def stop(session: Session, iv: Intervention, *, now: datetime) -> None:
    """A paused or rolled-back intervention: its open deliveries are cancelled (an attempt
    in flight finds its delivery cancelled and records nothing more), and its in-app
    message, if queued already, is not sent while it stays so (channels/in_app.py)."""
    delivery.cancel(session, subject_id=iv.id, kind=KIND, now=now)


def withdraw(session: Session, iv: Intervention, *, was: str, now: datetime) -> None:
    """After a rollback: in-app messages are withdrawn from the stream (a queued one is
    never sent, a sent one is announced as withdrawn); webhook and CRM receivers of work
    that was sent are told with an intervention.rolled_back event."""
    body = {"intervention_id": iv.id, "user_id": iv.user_id, "playbook_id": iv.playbook_id, "channel": iv.channel,
            "reason": iv.reason, "rolled_back_at": now.isoformat()}
    if iv.channel == "in_app":
        for fn in WITHDRAW_HOOKS:
            fn(session, iv, now)
    elif was not in ("sent", "delivered"):
        return
    elif iv.channel == "webhook":
        outbox.record(session, iv.tenant_id, "intervention.rolled_back", body, now=now, test=iv.test)
    elif iv.channel == "crm" and not iv.test:
        url = _crm_url(session, iv.tenant_id)
        if url:
            customer = session.get(Customer, (iv.tenant_id, iv.user_id))
            delivery.create(session, iv.tenant_id, kind="event", url=url,
                            body=crm_body("intervention.rolled_back", iv, customer), secret_enc="ref:crm",
                            event_type="intervention.rolled_back", subject_id=iv.id, now=now)


WITHDRAW_HOOKS: list = []   # how to withdraw an in-app message (the composition root adds it)


def _delivered(session: Session, iv: Intervention, now: datetime) -> None:
    if states.move(session, iv, "delivered", allowed=states.IN_FLIGHT, delivered_at=now, updated_at=now) is None:
        return
    iv.sent_at = iv.sent_at or now
    outcomes.open_window(session, iv, now)
    outbox.record(session, iv.tenant_id, "intervention.delivered", {
        "intervention_id": iv.id, "user_id": iv.user_id, "playbook_id": iv.playbook_id, "channel": iv.channel,
        "delivered_at": now.isoformat()}, now=now, test=iv.test)


def _failed(session: Session, iv: Intervention, why: str, now: datetime) -> None:
    if states.move(session, iv, "failed", allowed=states.IN_FLIGHT, updated_at=now) is None:
        return
    outbox.record(session, iv.tenant_id, "intervention.failed", {
        "intervention_id": iv.id, "user_id": iv.user_id, "channel": iv.channel,
        "error": {"code": "delivery_failed", "message": why}, "failed_at": now.isoformat()}, now=now, test=iv.test)


def _sent(session: Session, iv: Intervention, now: datetime) -> None:
    if states.move(session, iv, "sent", allowed=states.IN_FLIGHT, updated_at=now) is not None:
        iv.sent_at = iv.sent_at or now


def mark_delivered(session: Session, intervention_id: str, now: datetime) -> None:
    """For channels that deliver later than the attempt (the in-app stream on connect)."""
    iv = session.get(Intervention, intervention_id)
    if iv is not None:
        _delivered(session, iv, now)


def lock_subject(session: Session, intervention_id: str) -> None:
    """The intervention first, then its delivery: the order a pause or rollback takes them."""
    locked(session, Intervention, intervention_id)


def on_attempt(session: Session, made: Delivery, outcome: Outcome, final: bool) -> None:
    """Move the intervention as its delivery moved; one paused, rolled back or settled
    meanwhile stays as it is (`states.move` finds it out of flight)."""
    iv = session.get(Intervention, made.subject_id)
    if iv is None:
        return
    now = made.updated_at
    if made.status == "delivered":
        if iv.channel == "in_app" and not iv.test:
            _sent(session, iv, now)   # queued on the stream
        else:
            _delivered(session, iv, now)
    elif made.status == "failed":
        others = session.query(Delivery).filter(Delivery.subject_id == iv.id, Delivery.kind == KIND,
                                                Delivery.id != made.id,
                                                Delivery.status.in_(("pending", "retrying", "delivered"))).count()
        if not others:
            _failed(session, iv, outcome.error or "delivery failed", now)
    else:
        _sent(session, iv, now)


def still_wanted(session: Session, intervention_id: str) -> str | None:
    """Checked right before each attempt leaves: work paused or rolled back since it was
    claimed is not sent."""
    iv = session.get(Intervention, intervention_id)
    if iv is None or iv.status not in states.LIVE:
        return f"not sent: the intervention is {iv.status if iv else 'gone'}, no longer approved"
    return None


def _crm_url(session: Session, tenant_id: str) -> str | None:
    return tenants.config_of(session.get(Tenant, tenant_id)).crm_webhook_url


def crm_secret(session: Session, tenant_id: str) -> str:
    """Read at send time, decrypted from where it is kept (docs/tenant-config.md, "The CRM channel")."""
    secret = tenants.crm_secret(session.get(Tenant, tenant_id), session.info["settings"].secret_key)
    if not secret:
        raise LookupError("config.crm_webhook_secret is not set")
    return secret
