"""The payment provider: Stripe, through the `stripe` library (docs/billing.md).

`PaymentProvider(settings)` is a `stripe.StripeClient` with the key `STRIPE_SECRET_KEY`
and, when `STRIPE_API_BASE` is set, that address as its API base (the client's own
`base_addresses` option, so nothing global is changed). Calls are bounded by a time-out
and the library's own retries, which send an idempotency key with every POST. A refusal
or an unreachable Stripe is a 502. `verify_event` checks `Stripe-Signature` with the
library's own webhook verification.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from typing import Iterator

import stripe

from ..config import Settings
from ..errors import BillingNotConfigured, ServiceError, ValidationFailed

log = logging.getLogger(__name__)

TIMEOUT_S = 20
NETWORK_RETRIES = 2


class ProviderError(ServiceError):
    """Stripe refused the call or could not be reached."""

    status, code = 502, "internal"


class PaymentProvider:
    def __init__(self, settings: Settings):
        if not settings.stripe_secret_key:
            raise BillingNotConfigured("billing is not configured: STRIPE_SECRET_KEY is not set")
        base = {"api": settings.stripe_api_base.rstrip("/")} if settings.stripe_api_base else None
        self._stripe = stripe.StripeClient(
            settings.stripe_secret_key, base_addresses=base, max_network_retries=NETWORK_RETRIES,
            http_client=stripe.RequestsClient(timeout=TIMEOUT_S),
        )

    def create_customer(self, *, tenant_id: str, name: str, email: str | None) -> str:
        """A Stripe customer for the tenant; the idempotency key makes a repeated call
        (a checkout whose transaction rolled back) answer the same customer."""
        params = {"name": name, "metadata": {"tenant_id": tenant_id}}
        if email:
            params["email"] = email
        with _calling("create the customer"):
            customer = self._stripe.v1.customers.create(
                params, {"idempotency_key": f"cs-tenant-{tenant_id}-customer"})
        return customer.id

    def checkout_url(self, *, customer_id: str, price_id: str, tenant_id: str, metadata: dict[str, str],
                     success_url: str, cancel_url: str) -> str:
        """A subscription Checkout Session for one price; its URL."""
        params = {
            "mode": "subscription", "customer": customer_id, "client_reference_id": tenant_id,
            "line_items": [{"price": price_id, "quantity": 1}],
            "success_url": success_url, "cancel_url": cancel_url,
            "metadata": metadata, "subscription_data": {"metadata": metadata},
        }
        with _calling("open a checkout session"):
            return self._stripe.v1.checkout.sessions.create(params).url

    def portal_url(self, *, customer_id: str, return_url: str) -> str:
        with _calling("open a billing portal session"):
            return self._stripe.v1.billing_portal.sessions.create(
                {"customer": customer_id, "return_url": return_url}).url


@contextmanager
def _calling(what: str) -> Iterator[None]:
    try:
        yield
    except stripe.StripeError as exc:
        log.warning("stripe: could not %s: %s", what, exc.user_message or exc)
        raise ProviderError(f"the payment provider could not {what}: {exc.user_message or exc}") from None


def verify_event(payload: bytes, signature: str | None, secret: str) -> dict:
    """The event of a webhook delivery whose `Stripe-Signature` is valid and recent
    (the library's five-minute tolerance); 400 otherwise."""
    try:
        stripe.WebhookSignature.verify_header(payload, signature, secret, stripe.Webhook.DEFAULT_TOLERANCE)
        event = json.loads(payload)
    except (stripe.SignatureVerificationError, UnicodeDecodeError, ValueError) as exc:
        raise ValidationFailed(f"invalid Stripe webhook: {exc}",
                               [{"field": "Stripe-Signature", "message": str(exc)}]) from None
    if not (isinstance(event, dict) and isinstance(event.get("id"), str) and isinstance(event.get("type"), str)):
        raise ValidationFailed("invalid Stripe webhook: not an event",
                               [{"field": "body", "message": "must be a Stripe event with id and type"}])
    return event
