"""Property-based fuzzing of every route (docs/api.md, Fuzzing): schemathesis reads
`GET /api/openapi.json` from a real `cs serve` on loopback, on both backends, and sends
generated requests to every operation with a key that may call it. Every answer must be
one the document lists: no 5xx, a listed status code, a body matching its schema (the
error shape on every 4xx).

CS_FUZZ_EXAMPLES sets the examples per operation (default below, sized so one backend
takes about two minutes on a 2-core machine); `just fuzz` runs many more. The seed is
fixed (derandomized), so a run is the same every time.
"""

from __future__ import annotations

import json
import os

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance, negative_data_rejection, response_schema_conformance, status_code_conformance,
)

from tests.support.daemon import running_daemon
from tests.support.stripe_server import StripeServer, sign

EXAMPLES = int(os.environ.get("CS_FUZZ_EXAMPLES", "20"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
PARTNER_ACCESS = {"partner", "partner_write"}
STRIPE_KEY = "sk_test_fuzz"
WEBHOOK_SECRET = "whsec_fuzz"
PRICES = {f"{plan}_{interval}": f"price_{plan}_{interval}"
          for plan in ("starter", "growth", "scale") for interval in ("monthly", "annual")}


@pytest.fixture
def stripe_api():
    server = StripeServer(api_key=STRIPE_KEY)
    yield server
    server.close()


@pytest.fixture(params=["embedded", "postgres"])
def live(request, tmp_path, stripe_api):
    """The daemon with billing through the Stripe on loopback, and a partner tenant on the
    largest plan (its rate limit leaves room for every generated request)."""
    billing = {"STRIPE_SECRET_KEY": STRIPE_KEY, "STRIPE_API_BASE": stripe_api.base_url,
               "STRIPE_PRICES": json.dumps(PRICES), "STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET}
    with running_daemon(request.param, tmp_path, **billing) as daemon:
        made = daemon.cs("tenant", "create", "Fuzz", "--owner-email", "owner@fuzz.example",
                         "--plan", "scale", "--partner")
        partner = daemon.cs("keys", "issue", "--tenant", made["tenant_id"], "--role", "admin",
                            "--permission", "partner")
        daemon.keys = {"admin": made["api_key"], "partner": partner["api_key"]}
        yield daemon


def _key_for(operation, keys: dict[str, str]) -> str:
    access = operation.definition.raw.get("x-access", {}).get("class")
    return keys["partner"] if access in PARTNER_ACCESS else keys["admin"]


def _signed(case) -> dict:
    """The generated body as Stripe sends a webhook: its bytes and their signature."""
    raw = json.dumps(case.body)
    return {"data": raw.encode(), "headers": {"Stripe-Signature": sign(raw, WEBHOOK_SECRET)}}


def _fuzz(operation, base_url: str, key: str, http: requests.Session) -> None:
    sends = _signed if operation.path == "/api/billing/webhook" else lambda case: {}

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(case=operation.as_strategy())
    def run(case):
        extra = sends(case)
        headers = {"Authorization": f"Bearer {key}", **extra.pop("headers", {})}
        case.call_and_validate(base_url=base_url, session=http, headers=headers, checks=CHECKS, timeout=30, **extra)

    run()


def test_every_operation_answers_as_documented(live):
    schema = schemathesis.openapi.from_url(f"{live.url}/api/openapi.json")
    failures: list[str] = []
    with requests.Session() as http:
        for result in schema.get_all_operations():
            operation = result.ok()
            try:
                _fuzz(operation, live.url, _key_for(operation, live.keys), http)
            except (Exception, BaseExceptionGroup) as exc:  # every operation is tried; all failures reported
                failures.append(f"== {operation.label}\n{exc}")
    assert not failures, f"{len(failures)} operations answered outside the document:\n\n" + "\n\n".join(failures)
