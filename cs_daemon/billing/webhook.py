"""The Stripe webhook: verified events that keep a tenant's plan in step with its
subscription (docs/billing.md lists each event and its effect).

Each event is applied once: its Stripe id is recorded in `stripe_events` in the same
transaction as its effect, so a redelivery (Stripe retries until it gets a 2xx) changes
nothing. The tenant is found by its Stripe customer, else by the tenant id our checkout
put in `client_reference_id` / `metadata.tenant_id`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Callable

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from ..config import Settings
from ..errors import BillingNotConfigured
from ..integrations.billing import verify_event
from ..tenants.models import Tenant
from ..tenants.service import set_plan
from .models import StripeEvent
from .prices import PAID_PLANS, plan_of

# Stripe subscription status → plan_status; the statuses of ENDED stop the paid plan.
LIVE_STATUSES = {"active": "active", "trialing": "trialing", "past_due": "past_due"}
ENDED = frozenset({"canceled", "unpaid", "incomplete_expired", "paused"})
AFTER_CANCEL = "trial"   # the tier (and limits) of a tenant whose subscription ended


def receive(session: Session, settings: Settings, payload: bytes, signature: str | None,
            *, now: datetime) -> bool:
    """Verify and apply one delivery; False when the event was applied before."""
    if not settings.stripe_webhook_secret:
        raise BillingNotConfigured("billing webhooks are not configured: STRIPE_WEBHOOK_SECRET is not set")
    event = verify_event(payload, signature, settings.stripe_webhook_secret)
    if not _first_delivery(session, event, now):
        return False
    apply = HANDLERS.get(event["type"])
    obj = (event.get("data") or {}).get("object")
    if apply and isinstance(obj, dict):
        apply(session, settings, obj)
    return True


def _first_delivery(session: Session, event: dict, now: datetime) -> bool:
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    table = StripeEvent.__table__
    stmt = insert(table).values(id=event["id"][:255], type=event["type"][:100], received_at=now)
    return session.execute(stmt.on_conflict_do_nothing(index_elements=["id"]).returning(table.c.id)).first() is not None


def _checkout_completed(session: Session, settings: Settings, checkout: dict) -> None:
    """A paid (or free-trial) subscription checkout: the plan it sold, active."""
    plan = (checkout.get("metadata") or {}).get("plan")
    if checkout.get("mode") != "subscription" or checkout.get("payment_status") == "unpaid":
        return   # an asynchronous payment: the subscription events follow
    tenant = _tenant_of(session, checkout)
    if tenant is None or plan not in PAID_PLANS:
        return
    tenant.stripe_customer_id = tenant.stripe_customer_id or _customer_id(checkout)
    set_plan(tenant, plan, "active")


def _subscription_updated(session: Session, settings: Settings, subscription: dict) -> None:
    """The subscription's status becomes plan_status; its price says the plan."""
    tenant = _tenant_of(session, subscription)
    status = subscription.get("status")
    if tenant is None:
        return
    if status in ENDED:
        set_plan(tenant, AFTER_CANCEL, "canceled")
    elif status in LIVE_STATUSES:
        plan = plan_of(settings.stripe_prices, _price_id(subscription)) or _metadata_plan(subscription)
        set_plan(tenant, plan or tenant.plan_tier, LIVE_STATUSES[status])


def _subscription_deleted(session: Session, settings: Settings, subscription: dict) -> None:
    tenant = _tenant_of(session, subscription)
    if tenant is not None:
        set_plan(tenant, AFTER_CANCEL, "canceled")


def _payment_failed(session: Session, settings: Settings, invoice: dict) -> None:
    tenant = _tenant_of(session, invoice)
    if tenant is not None and tenant.plan_status != "canceled":
        set_plan(tenant, tenant.plan_tier, "past_due")


HANDLERS: dict[str, Callable[[Session, Settings, dict], None]] = {
    "checkout.session.completed": _checkout_completed,
    "customer.subscription.updated": _subscription_updated,
    "customer.subscription.deleted": _subscription_deleted,
    "invoice.payment_failed": _payment_failed,
}


def _tenant_of(session: Session, obj: dict) -> Tenant | None:
    customer = _customer_id(obj)
    if customer:
        tenant = session.scalar(select(Tenant).where(Tenant.stripe_customer_id == customer))
        if tenant is not None:
            return tenant
    tenant_id = obj.get("client_reference_id") or (obj.get("metadata") or {}).get("tenant_id")
    tenant = session.get(Tenant, tenant_id) if isinstance(tenant_id, str) else None
    # a tenant with another billing account is not taken over by a stray tenant id
    return tenant if tenant is not None and tenant.stripe_customer_id in (None, customer) else None


def _customer_id(obj: dict) -> str | None:
    customer = obj.get("customer")
    return customer.get("id") if isinstance(customer, dict) else customer


def _price_id(subscription: dict) -> str | None:
    items = (subscription.get("items") or {}).get("data") or [{}]
    price = (items[0] or {}).get("price")
    return price.get("id") if isinstance(price, dict) else price


def _metadata_plan(obj: dict) -> str | None:
    plan = (obj.get("metadata") or {}).get("plan")
    return plan if plan in PAID_PLANS else None
