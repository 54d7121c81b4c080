"""Checkout and the billing portal: the tenant's Stripe customer (its billing account),
made on the first checkout and reused after, and the session URLs the admin is sent to."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..config import Settings
from ..errors import NotFound
from ..integrations.billing import PaymentProvider
from ..team.models import Member
from ..tenants import service as tenants
from ..tenants.models import Tenant
from .prices import price_for


def start_checkout(session: Session, settings: Settings, tenant_id: str, *, plan: str, interval: str,
                   now: datetime) -> str:
    """The URL of a subscription Checkout Session for `plan` billed per `interval`."""
    provider = PaymentProvider(settings)
    price = price_for(settings.stripe_prices, plan, interval)
    tenant = tenants.get(session, tenant_id, now=now)
    return provider.checkout_url(
        customer_id=_billing_account(session, provider, tenant), price_id=price, tenant_id=tenant.id,
        metadata={"tenant_id": tenant.id, "plan": plan, "interval": interval},
        success_url=_back(settings, "billing=success&session_id={CHECKOUT_SESSION_ID}"),
        cancel_url=_back(settings, "billing=canceled"),
    )


def open_portal(session: Session, settings: Settings, tenant_id: str, *, now: datetime) -> str:
    """The URL of a billing-portal session of the tenant's billing account."""
    provider = PaymentProvider(settings)
    tenant = tenants.get(session, tenant_id, now=now)
    if not tenant.stripe_customer_id:
        raise NotFound("no billing account: the tenant has not been through checkout yet")
    return provider.portal_url(customer_id=tenant.stripe_customer_id, return_url=settings.stripe_return_url)


def _billing_account(session: Session, provider: PaymentProvider, tenant: Tenant) -> str:
    if not tenant.stripe_customer_id:
        tenant.stripe_customer_id = provider.create_customer(
            tenant_id=tenant.id, name=tenant.name, email=_first_admin_email(session, tenant.id))
        session.flush()
    return tenant.stripe_customer_id


def _first_admin_email(session: Session, tenant_id: str) -> str | None:
    return session.scalar(
        select(Member.email)
        .where(Member.tenant_id == tenant_id, Member.role == "admin", Member.removed_at.is_(None))
        .order_by(Member.created_at).limit(1)
    )


def _back(settings: Settings, query: str) -> str:
    """STRIPE_RETURN_URL with `query` added (kept raw: Stripe fills in {CHECKOUT_SESSION_ID})."""
    url = settings.stripe_return_url
    return f"{url}{'&' if '?' in url else '?'}{query}"
