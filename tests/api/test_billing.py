"""Billing (docs/billing.md): the real `stripe` library talks to a
Stripe-compatible server on loopback, and webhook deliveries are signed as Stripe signs them."""

from __future__ import annotations

import json
import time

import pytest

from cs_daemon.config import SettingsError, load_settings
from cs_daemon.runtime import Runtime
from tests.conftest import auth
from tests.support.stripe_server import StripeServer, event, sign
from webapp import create_app

SECRET_KEY = "sk_test_billing"
WEBHOOK_SECRET = "whsec_test_billing"
RETURN_URL = "https://app.example/billing"
PRICES = {f"{plan}_{interval}": f"price_{plan}_{interval}"
          for plan in ("starter", "growth", "scale") for interval in ("monthly", "annual")}


@pytest.fixture
def stripe_api():
    server = StripeServer(api_key=SECRET_KEY)
    yield server
    server.close()


def _billing(stripe_api: StripeServer, **update) -> dict:
    return {"stripe_secret_key": SECRET_KEY, "stripe_api_base": stripe_api.base_url, "stripe_prices": PRICES,
            "stripe_webhook_secret": WEBHOOK_SECRET, "stripe_return_url": RETURN_URL, **update}


@pytest.fixture
def rt(settings, clock, stripe_api):
    """Every app of this module bills through the test Stripe (overrides conftest's rt)."""
    return Runtime(settings.model_copy(update=_billing(stripe_api)), clock)


def _client(settings, clock, stripe_api, **update):
    rt = Runtime(settings.model_copy(update=_billing(stripe_api, **update)), clock)
    return create_app(runtime=rt).test_client()


def _checkout(client, tenant, plan="growth", **body):
    return client.post("/api/billing/checkout", headers=auth(tenant.key), json={"plan": plan, **body})


def _plan(client, tenant) -> tuple:
    t = client.get("/api/settings", headers=auth(tenant.key)).json["tenant"]
    return t["plan_tier"], t["plan_status"], t["tracked_user_limit"]


# --- checkout and portal -------------------------------------------------------------

def test_checkout_answers_the_session_url_and_makes_the_customer_once(client, tenant, stripe_api):
    first = _checkout(client, tenant, "growth")
    assert first.status_code == 200
    second = _checkout(client, tenant, "scale", interval="annual")
    assert second.status_code == 200
    sessions = stripe_api.posts("/v1/checkout/sessions")
    assert [first.json["url"], second.json["url"]] == [
        f"https://checkout.stripe.com/c/pay/cs_test_{n}" for n in (2, 3)]
    [made] = stripe_api.posts("/v1/customers")
    assert made.headers["authorization"] == f"Bearer {SECRET_KEY}"
    assert made.form["metadata[tenant_id]"] == tenant.id and made.form["email"] == "owner@acme.example"
    assert made.form["name"] == "Acme"
    customer = next(iter(stripe_api.customers))
    assert [s.form["customer"] for s in sessions] == [customer, customer]


@pytest.mark.parametrize("body, price", [
    ({"plan": "starter"}, "price_starter_monthly"),
    ({"plan": "growth", "interval": "monthly"}, "price_growth_monthly"),
    ({"plan": "growth", "interval": "annual"}, "price_growth_annual"),
    ({"plan": "scale", "interval": "annual"}, "price_scale_annual"),
])
def test_the_session_sells_the_price_of_the_plan_and_interval(client, tenant, stripe_api, body, price):
    assert client.post("/api/billing/checkout", headers=auth(tenant.key), json=body).status_code == 200
    [sent] = stripe_api.posts("/v1/checkout/sessions")
    form = sent.form
    assert (form["line_items[0][price]"], form["line_items[0][quantity]"], form["mode"]) == (price, "1", "subscription")
    assert form["client_reference_id"] == tenant.id
    assert form["metadata[plan]"] == body["plan"] and form["subscription_data[metadata][tenant_id]"] == tenant.id
    assert form["success_url"] == RETURN_URL + "?billing=success&session_id={CHECKOUT_SESSION_ID}"
    assert form["cancel_url"] == RETURN_URL + "?billing=canceled"


@pytest.mark.parametrize("body, field", [
    ({"plan": "gold"}, "plan"),
    ({"plan": "trial"}, "plan"),
    ({}, "plan"),
    ({"plan": "growth", "interval": "weekly"}, "interval"),
])
def test_an_invalid_plan_or_interval_is_400_and_reaches_no_stripe(client, tenant, stripe_api, body, field):
    resp = client.post("/api/billing/checkout", headers=auth(tenant.key), json=body)
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed"
    assert [d["field"] for d in resp.json["details"]] == [field]
    assert stripe_api.requests == []


def test_portal_is_404_without_a_billing_account_then_answers_its_url(client, tenant, stripe_api):
    resp = client.get("/api/billing/portal", headers=auth(tenant.key))
    assert resp.status_code == 404 and resp.json["code"] == "not_found"
    assert stripe_api.requests == []
    _checkout(client, tenant)
    resp = client.get("/api/billing/portal", headers=auth(tenant.key))
    assert resp.status_code == 200
    [sent] = stripe_api.posts("/v1/billing_portal/sessions")
    assert sent.form == {"customer": next(iter(stripe_api.customers)), "return_url": RETURN_URL}
    assert resp.json == {"url": "https://billing.stripe.com/p/session/bps_test_3"}


def test_billing_follows_the_roles_of_every_write_and_read(client, tenant, stripe_api):
    """Billing is not on the spec's admin-only list: an editor may start a checkout, any
    role may open the portal (a GET); a viewer may not start a checkout."""
    viewer = auth(tenant.issue("viewer", ["full"]))
    resp = client.post("/api/billing/checkout", headers=viewer, json={"plan": "growth"})
    assert resp.status_code == 403 and resp.json["code"] == "forbidden"
    assert stripe_api.requests == []
    editor = auth(tenant.issue("editor", ["full"]))
    assert client.post("/api/billing/checkout", headers=editor, json={"plan": "growth"}).status_code == 200
    for key in (viewer, editor, auth(tenant.issue("admin", ["read"]))):
        assert client.get("/api/billing/portal", headers=key).status_code == 200


def test_without_stripe_settings_billing_is_503(settings, clock, tenant, stripe_api):
    client = _client(settings, clock, stripe_api, stripe_secret_key=None, stripe_webhook_secret=None)
    for resp in (_checkout(client, tenant), client.get("/api/billing/portal", headers=auth(tenant.key)),
                 client.post("/api/billing/webhook", data="{}", headers={"Stripe-Signature": sign("{}", "x")})):
        assert resp.status_code == 503 and resp.json["code"] == "billing_not_configured"
    unpriced = _client(settings, clock, stripe_api, stripe_prices={"growth_monthly": "price_g"})
    resp = _checkout(unpriced, tenant, "growth", interval="annual")
    assert resp.status_code == 503 and "growth_annual" in resp.json["error"]
    assert stripe_api.requests == []


def test_a_stripe_refusal_is_502_and_a_retry_gets_the_same_customer(client, tenant, stripe_api):
    stripe_api.fail_next["/v1/checkout/sessions"] = (400, "No such price: 'price_growth_monthly'")
    resp = _checkout(client, tenant)
    assert resp.status_code == 502 and "No such price" in resp.json["error"]
    assert _checkout(client, tenant).status_code == 200
    keys = {r.headers["idempotency-key"] for r in stripe_api.posts("/v1/customers")}
    assert len(stripe_api.posts("/v1/customers")) == 2 and len(keys) == 1   # the rolled-back id, asked again
    assert len(stripe_api.customers) == 1


def test_stripe_prices_setting_is_checked_at_start_up(monkeypatch):
    monkeypatch.setenv("STRIPE_PRICES", '{"gold_monthly": "price_x"}')
    with pytest.raises(SettingsError, match="^STRIPE_PRICES: unknown key 'gold_monthly'"):
        load_settings()
    monkeypatch.setenv("STRIPE_PRICES", json.dumps(PRICES))
    assert load_settings().stripe_prices == PRICES


# --- the webhook ---------------------------------------------------------------------

def _deliver(client, payload: str, signature: str | None = None):
    headers = {"Content-Type": "application/json",
               "Stripe-Signature": sign(payload, WEBHOOK_SECRET) if signature is None else signature}
    return client.post("/api/billing/webhook", data=payload, headers=headers)


def _customer_of(client, tenant, stripe_api) -> str:
    assert _checkout(client, tenant).status_code == 200
    return stripe_api.posts("/v1/checkout/sessions")[-1].form["customer"]


def _completed(tenant, customer, plan="growth", **extra) -> dict:
    return {"id": "cs_test_done", "object": "checkout.session", "mode": "subscription", "customer": customer,
            "client_reference_id": tenant.id, "payment_status": "paid", "status": "complete",
            "metadata": {"tenant_id": tenant.id, "plan": plan, "interval": "monthly"}, **extra}


def _subscription(customer, status="active", price="price_scale_monthly") -> dict:
    return {"id": "sub_test", "object": "subscription", "customer": customer, "status": status,
            "items": {"object": "list", "data": [{"id": "si_test", "object": "subscription_item",
                                                  "price": {"id": price, "object": "price"}}]},
            "metadata": {"plan": "growth"}}


def test_a_completed_checkout_puts_the_tenant_on_the_plan(client, tenant, stripe_api):
    customer = _customer_of(client, tenant, stripe_api)
    assert _plan(client, tenant) == ("trial", "trialing", 1_000)
    resp = _deliver(client, event("checkout.session.completed", _completed(tenant, customer)))
    assert resp.status_code == 200 and resp.json == {"received": True, "duplicate": False}
    assert _plan(client, tenant) == ("growth", "active", 100_000)


@pytest.mark.parametrize("status, price, expected", [
    ("active", "price_scale_annual", ("scale", "active", None)),
    ("trialing", "price_starter_monthly", ("starter", "trialing", 10_000)),
    ("past_due", "price_scale_monthly", ("scale", "past_due", None)),
    ("active", "price_unknown", ("growth", "active", 100_000)),      # a price not in STRIPE_PRICES: the metadata plan
    ("unpaid", "price_scale_monthly", ("trial", "canceled", 1_000)),
    ("canceled", "price_scale_monthly", ("trial", "canceled", 1_000)),
])
def test_a_subscription_update_sets_status_and_plan_from_its_price(client, tenant, stripe_api, status, price,
                                                                   expected):
    customer = _customer_of(client, tenant, stripe_api)
    resp = _deliver(client, event("customer.subscription.updated", _subscription(customer, status, price)))
    assert resp.status_code == 200
    assert _plan(client, tenant) == expected


def test_a_deleted_subscription_cancels_back_to_trial_limits(client, tenant, stripe_api):
    customer = _customer_of(client, tenant, stripe_api)
    _deliver(client, event("checkout.session.completed", _completed(tenant, customer, "scale")))
    assert _plan(client, tenant) == ("scale", "active", None)
    _deliver(client, event("customer.subscription.deleted", _subscription(customer, "canceled")))
    assert _plan(client, tenant) == ("trial", "canceled", 1_000)


def test_a_failed_invoice_payment_makes_the_plan_past_due(client, tenant, stripe_api):
    customer = _customer_of(client, tenant, stripe_api)
    _deliver(client, event("checkout.session.completed", _completed(tenant, customer)))
    invoice = {"id": "in_test", "object": "invoice", "customer": customer, "status": "open", "attempt_count": 1}
    assert _deliver(client, event("invoice.payment_failed", invoice)).status_code == 200
    assert _plan(client, tenant) == ("growth", "past_due", 100_000)


@pytest.mark.parametrize("tamper", ["wrong secret", "changed body", "no header", "stale", "garbage header"])
def test_a_bad_signature_is_400_and_changes_nothing(client, tenant, stripe_api, tamper):
    customer = _customer_of(client, tenant, stripe_api)
    payload = event("checkout.session.completed", _completed(tenant, customer), event_id="evt_signed")
    signature, body = {
        "wrong secret": (sign(payload, "whsec_other"), payload),
        "changed body": (sign(payload, WEBHOOK_SECRET), payload.replace('"growth"', '"scale"')),
        "no header": ("", payload),
        "stale": (sign(payload, WEBHOOK_SECRET, int(time.time()) - 600), payload),
        "garbage header": ("v1=abc", payload),
    }[tamper]
    resp = _deliver(client, body, signature)
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed"
    assert _plan(client, tenant) == ("trial", "trialing", 1_000)
    assert _deliver(client, payload).json == {"received": True, "duplicate": False}   # the event id was not spent
    assert _plan(client, tenant) == ("growth", "active", 100_000)


def test_a_replayed_event_changes_nothing_the_second_time(client, tenant, stripe_api):
    customer = _customer_of(client, tenant, stripe_api)
    upgrade = event("customer.subscription.updated", _subscription(customer, "active", "price_scale_monthly"),
                    event_id="evt_upgrade")
    assert _deliver(client, upgrade).json == {"received": True, "duplicate": False}
    _deliver(client, event("customer.subscription.deleted", _subscription(customer, "canceled")))
    resp = _deliver(client, upgrade)
    assert resp.status_code == 200 and resp.json == {"received": True, "duplicate": True}
    assert _plan(client, tenant) == ("trial", "canceled", 1_000)


def test_an_event_changes_only_the_tenant_whose_customer_it_names(client, make_tenant, stripe_api):
    acme, globex = make_tenant("Acme"), make_tenant("Globex")
    _customer_of(client, acme, stripe_api)
    globex_customer = _customer_of(client, globex, stripe_api)
    _deliver(client, event("customer.subscription.updated", _subscription(globex_customer)))
    assert _plan(client, globex) == ("scale", "active", None)
    assert _plan(client, acme) == ("trial", "trialing", 1_000)
    stray = event("customer.subscription.updated", _subscription("cus_someone_else"))
    assert _deliver(client, stray).status_code == 200
    assert _plan(client, acme) == ("trial", "trialing", 1_000)


def test_a_checkout_event_does_not_move_a_tenant_with_another_billing_account(client, make_tenant, stripe_api):
    acme = make_tenant("Acme")
    _customer_of(client, acme, stripe_api)
    forged = _completed(acme, "cus_not_acmes", "scale")    # acme's id, someone else's customer
    assert _deliver(client, event("checkout.session.completed", forged)).status_code == 200
    assert _plan(client, acme) == ("trial", "trialing", 1_000)
