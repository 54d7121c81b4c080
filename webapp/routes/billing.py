"""Billing: Checkout and billing-portal sessions at Stripe, and Stripe's webhook
(docs/billing.md)."""

from __future__ import annotations

from flask import request

from cs_daemon.billing import service as billing
from cs_daemon.billing import webhook
from cs_daemon.billing.schemas import CheckoutRequest, SessionUrl, WebhookReceived

from ..api import Api, Call

api = Api("Billing")


@api.route("POST", "/api/billing/checkout", access="write", configures=True, body=CheckoutRequest,
           response=SessionUrl, errors=(400, 404, 502, 503),
           summary="Open a Stripe Checkout Session subscribing the tenant to a plan; answers its URL")
def post_checkout(call: Call):
    url = billing.start_checkout(call.session, call.rt.settings, call.tenant_id, plan=call.body.plan,
                                 interval=call.body.interval, now=call.now)
    return SessionUrl(url=url)


@api.route("GET", "/api/billing/portal", access="read", response=SessionUrl, errors=(404, 502, 503),
           summary="Open a Stripe billing-portal session for the tenant's billing account; answers its URL")
def get_portal(call: Call):
    return SessionUrl(url=billing.open_portal(call.session, call.rt.settings, call.tenant_id, now=call.now))


@api.route("POST", "/api/billing/webhook", access="public", response=WebhookReceived, errors=(400, 503),
           payload={"application/json": {"type": "object", "description": "A Stripe event, as Stripe signs it"}},
           summary="Stripe's webhook (verified by Stripe-Signature): keeps plan_tier and plan_status "
                   "in step with the subscription")
def post_webhook(call: Call):
    applied = webhook.receive(call.session, call.rt.settings, request.get_data(cache=False),
                              request.headers.get("Stripe-Signature"), now=call.now)
    return WebhookReceived(received=True, duplicate=not applied)
