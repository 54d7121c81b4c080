"""Webhook endpoints: registration, updates, soft delete, the test send, the fan-out of
outbox events to subscribed endpoints, and the delivery log."""

from __future__ import annotations

import secrets
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy import update as sql_update
from sqlalchemy.orm import Session

from .. import crypto, domain_events, plans
from ..delivery import service as delivery
from ..delivery import states as delivery_states
from ..delivery.models import Delivery
from ..errors import FeatureNotOnPlan, NotFound, PlanLimit, ValidationFailed
from ..integrations import netguard
from ..integrations.http import Outcome
from ..tenants.models import Tenant
from ..uow import uow_of
from . import catalogue
from .models import WebhookEndpoint

# the channels (channels/webhook.py, channels/crm.py; named here, as the webhook channel
# imports the outbox, whose rows this module fans out) that POST over HTTP: their
# deliveries make the webhook log
WEBHOOK = "webhook"
OVER_HTTP = (WEBHOOK, "crm")

# a test-mode event carries this header and `"test": true` in its body; a live one neither
# (docs/webhooks.md, "Test mode")
TEST_HEADER = "X-Service-Test"


def _check_events(events: list[str] | None) -> None:
    bad = [{"field": f"events[{i}]", "message": f"unknown event type {e!r}"}
           for i, e in enumerate(events or []) if not catalogue.valid(e)]
    if bad:
        raise ValidationFailed(f"unknown event type {bad[0]['message'].split()[-1]}", bad)


def _check_url(url: str, *, allow_private: bool, tenant_id: str | None) -> None:
    try:
        netguard.check(url, allow_private=allow_private, tenant=tenant_id)
    except netguard.UrlRefused as exc:
        raise ValidationFailed(f"url refused: {exc}", [{"field": "url", "message": str(exc)}]) from None


def register(session: Session, tenant_id: str, *, url: str, description: str | None,
             events: list[str] | None, now: datetime, secret_key: str,
             allow_private: bool) -> tuple[WebhookEndpoint, str]:
    """A new endpoint and its secret (64 hex characters, shown once)."""
    tenant = _locked(session, tenant_id)
    plan = plans.plan(tenant.plan_tier)
    if not plan.webhooks:
        raise FeatureNotOnPlan(f"webhooks are not on the {tenant.plan_tier} plan",
                               upgrade_to=plans.cheapest_with("webhooks"))
    current = count_active(session)
    if current >= plan.webhook_endpoints:
        raise PlanLimit(f"the {tenant.plan_tier} plan allows {plan.webhook_endpoints} active webhook endpoints; "
                        "delete one or upgrade", current=current, limit=plan.webhook_endpoints,
                        upgrade_to=plan.upgrade_to)
    _check_events(events)
    _check_url(url, allow_private=allow_private, tenant_id=tenant_id)
    secret = secrets.token_hex(32)
    endpoint = WebhookEndpoint(tenant_id=tenant_id, url=url, description=description,
                               subscribed_events=None if events is None else list(dict.fromkeys(events)),
                               secret_enc=crypto.encrypt(secret_key, secret), active=True,
                               created_at=now, updated_at=now)
    session.add(endpoint)
    session.flush()
    return endpoint, secret


def _locked(session: Session, tenant_id: str) -> Tenant:
    """The tenant, locked until this transaction ends, so two registrations cannot both
    count the endpoints before either adds one: a row lock on PostgreSQL; on SQLite a
    write (which takes the database's one write lock) before the count is read."""
    if session.get_bind().dialect.name == "sqlite":
        session.execute(sql_update(Tenant).where(Tenant.id == tenant_id).values(id=Tenant.id)
                        .execution_options(keeps_credentials=True))
        return session.get(Tenant, tenant_id)
    return session.get(Tenant, tenant_id, with_for_update=True)


def count_active(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(WebhookEndpoint)
                          .where(WebhookEndpoint.active.is_(True))) or 0


def get(session: Session, endpoint_id: str) -> WebhookEndpoint:
    endpoint = session.get(WebhookEndpoint, endpoint_id)
    if endpoint is None:
        raise NotFound("webhook endpoint not found")
    return endpoint


def list_active(session: Session) -> list[WebhookEndpoint]:
    return list(session.scalars(select(WebhookEndpoint).where(WebhookEndpoint.active.is_(True))
                                .order_by(WebhookEndpoint.created_at)))


def update(session: Session, endpoint_id: str, fields: dict, *, now: datetime,
           allow_private: bool) -> WebhookEndpoint:
    endpoint = get(session, endpoint_id)
    if "events" in fields:
        _check_events(fields["events"])
        endpoint.subscribed_events = None if fields["events"] is None else list(dict.fromkeys(fields["events"]))
    if fields.get("url") is not None:
        _check_url(fields["url"], allow_private=allow_private, tenant_id=endpoint.tenant_id)
        endpoint.url = fields["url"]
    if "description" in fields:
        endpoint.description = fields["description"]
    endpoint.updated_at = now
    return endpoint


def deactivate(session: Session, endpoint_id: str, *, now: datetime) -> WebhookEndpoint:
    endpoint = get(session, endpoint_id)
    if endpoint.active:
        _stop_sending(session, endpoint, now)
    return endpoint


def _stop_sending(session: Session, endpoint: WebhookEndpoint, now: datetime) -> None:
    """Deactivated (DELETE, or its receiver's 410): it gets no new delivery, and the ones
    still to go are cancelled, retries included."""
    endpoint.active = False
    endpoint.updated_at = now
    delivery.cancel_to_endpoint(session, endpoint.tenant_id, endpoint.id, now=now)


def fan_out(session: Session, tenant_id: str, events: list[tuple[str, str, dict]], *,
            now: datetime, test: bool = False) -> list[Delivery]:
    """One delivery per (event, subscribed active endpoint), in the caller's transaction.
    `events` are (event id, type, payload); `test`: they are test-mode data."""
    endpoints = list_active(session) if uow_of(session).tenant_id == tenant_id else list(
        session.scalars(select(WebhookEndpoint).where(WebhookEndpoint.tenant_id == tenant_id,
                                                      WebhookEndpoint.active.is_(True))))
    made = []
    body_mark, headers = ({"test": True}, {TEST_HEADER: "1"}) if test else ({}, None)
    for event_id, kind, payload in events:
        for endpoint in endpoints:
            if catalogue.matches(endpoint.subscribed_events, kind):
                made.append(delivery.create(
                    session, tenant_id, kind="event", channel=WEBHOOK, url=endpoint.url, body={**payload, **body_mark},
                    secret_enc=endpoint.secret_enc, event_type=kind, endpoint_id=endpoint.id,
                    subject_id=event_id, headers=headers, test=test, now=now))
    return made


def fan_out_written(session: Session, event: domain_events.OutboxRowsWritten) -> None:
    """The handler of OutboxRowsWritten (registered by cs_daemon/wiring.py): one delivery
    per subscribed endpoint of each row written."""
    fan_out(session, event.tenant_id, [(r["id"], r["event_type"], r["payload"]) for r in event.rows],
            now=event.now, test=event.test)


def send_test(session: Session, endpoint_id: str, *, now: datetime) -> Delivery:
    """A `webhook.test` delivery of one attempt, for the caller to send at once; it is
    logged like any delivery. A deleted (inactive) endpoint is not found: it receives
    nothing new."""
    endpoint = get(session, endpoint_id)
    if not endpoint.active:
        raise NotFound("webhook endpoint not found")
    made = delivery.create(
        session, endpoint.tenant_id, kind="test", channel=WEBHOOK, url=endpoint.url,
        body={"event": "webhook.test", "endpoint_id": endpoint.id, "sent_at": now.isoformat()},
        secret_enc=endpoint.secret_enc, event_type="webhook.test", endpoint_id=endpoint.id,
        now=now, max_attempts=1, enqueue=False)
    return made


def deliveries(session: Session, endpoint_id: str, *, status: str | None, limit: int = 100) -> list[Delivery]:
    get(session, endpoint_id)
    query = (select(Delivery).where(Delivery.endpoint_id == endpoint_id)
             .order_by(Delivery.created_at.desc(), Delivery.id.desc()).limit(limit))
    if status:
        query = query.where(Delivery.status == status)
    return list(session.scalars(query))


def delivery_log(session: Session, tenant_id: str, *, endpoint_id: str | None = None,
                 status: str | None = None, since: datetime | None = None,
                 limit: int | None = 100) -> list[Delivery]:
    """A tenant's webhook deliveries (those POSTed over HTTP, by the webhook and CRM
    channels: endpoint events and tests, webhook-channel and CRM interventions, action
    dispatches; not email, in-app or test-mode sinks), newest first, optionally of one
    endpoint, in one status, or created at or after `since` (no limit when `limit` is None)."""
    query = (select(Delivery).where(Delivery.tenant_id == tenant_id, Delivery.channel.in_(OVER_HTTP))
             .order_by(Delivery.created_at.desc(), Delivery.id.desc()))
    if endpoint_id:
        query = query.where(Delivery.endpoint_id == endpoint_id)
    if status:
        query = query.where(Delivery.status == status)
    if since is not None:
        query = query.where(Delivery.created_at >= since)
    if limit is not None:
        query = query.limit(limit)
    return list(session.scalars(query))


def failed_since(session: Session, tenant_id: str, since: datetime) -> list[str]:
    """Ids of the tenant's deliveries that failed for good, created at or after `since`,
    oldest first (the order a replay should resend them in)."""
    rows = delivery_log(session, tenant_id, status=delivery_states.FAILED, since=since, limit=None)
    return [d.id for d in reversed(rows)]


def on_gone(session: Session, made: Delivery, outcome: Outcome, final: bool) -> None:
    """410 Gone: the receiver says the endpoint is no more (the attempt failed for good);
    stop sending to it."""
    if outcome.status_code == 410 and made.endpoint_id:
        endpoint = session.get(WebhookEndpoint, made.endpoint_id)
        if endpoint is not None and endpoint.active:
            _stop_sending(session, endpoint, made.updated_at)


def is_gone(outcome: Outcome, final: bool) -> bool:
    return outcome.status_code == 410
