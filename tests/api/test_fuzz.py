"""Property-based fuzzing of every route (docs/api.md, Fuzzing): schemathesis reads
`GET /api/openapi.json` from a real `cs serve` on loopback, on both backends, and sends
generated requests, valid and invalid, to every operation with a key that may call it.
Every answer must be one the document lists: no 5xx, a listed status code, a body
matching its schema (the error shape on every 4xx), and invalid input refused with a 4xx.

CS_FUZZ_EXAMPLES sets the examples per operation and kind of input (default 10: about
1.5 minutes of CPU per backend on a 2-core machine); `just fuzz` runs 100. The seed is
fixed (derandomized), so a run sends the same requests every time.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.parameters import ParameterLocation
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance, negative_data_rejection, response_schema_conformance, status_code_conformance,
)

from tests.support.daemon import running_daemon
from tests.support.known_ids import Known, item_params
from tests.support.stripe_server import StripeServer, sign

EXAMPLES = int(os.environ.get("CS_FUZZ_EXAMPLES", "10"))   # per operation and per mode (valid, invalid input)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          negative_data_rejection]
MODES = [GenerationMode(m) for m in os.environ.get("CS_FUZZ_MODES", "positive,negative").split(",")]
# The API ignores request fields and query parameters it does not know (docs/api.md,
# Fuzzing), so sending one is not invalid input that must be refused. Invalid input may
# also be refused by the HTTP server before the app: a request line too long (414).
REFUSALS = ["400", "401", "403", "404", "405", "409", "413", "414", "415", "429", "431"]
CONFIG = schemathesis.Config.from_dict({"generation": {"allow-extra-parameters": False},
                                        "checks": {"negative_data_rejection": {"expected-statuses": REFUSALS}}})
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
        tenant_id, admin = daemon.tenant("Fuzz", plan_tier="scale", partner=True)
        daemon.keys = {"admin": admin, "partner": daemon.key(tenant_id, role="admin", permissions=["partner"])}
        yield daemon


def _key_for(operation, keys: dict[str, str]) -> str:
    access = operation.definition.raw.get("x-access", {}).get("class")
    return keys["partner"] if access in PARTNER_ACCESS else keys["admin"]


def _signed(case) -> dict:
    """The generated body as Stripe sends a webhook: its bytes and their signature."""
    raw = json.dumps(case.body)
    return {"data": raw.encode(), "headers": {"Stripe-Signature": sign(raw, WEBHOOK_SECRET)}}


# an order in which later operations find what earlier ones made
METHOD_ORDER = {"POST": 0, "GET": 1, "PUT": 2, "PATCH": 3, "DELETE": 4}


def _fuzz(operation, mode: GenerationMode, base_url: str, key: str, http: requests.Session, known: Known,
          seen: Counter) -> None:
    signs = operation.path == "/api/billing/webhook" and mode is GenerationMode.POSITIVE
    sends = _signed if signs else lambda case: {}

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(case=operation.as_strategy(mode), pick=st.integers(0, 2**20 - 1))
    def run(case, pick):
        if mode is GenerationMode.POSITIVE:    # a negative case keeps the invalid part it was made for
            known.choose(case, pick)
        extra = sends(case)
        # a negative case whose invalid part is its Authorization header keeps it, or goes without
        # one where the header was left out (our key would make it valid)
        mutated = mode is GenerationMode.NEGATIVE and (
            "Authorization" in (case.headers or {})
            or case.meta is not None and case.meta.is_negative_at(ParameterLocation.HEADER))
        headers = {**({} if mutated else {"Authorization": f"Bearer {key}"}), **extra.pop("headers", {})}
        response = case.call_and_validate(base_url=base_url, session=http, headers=headers, checks=CHECKS,
                                          timeout=30, **extra)
        seen[f"{response.status_code // 100}xx"] += 1
        if response.status_code < 300 and "json" in response.headers.get("content-type", [""])[0]:
            known.harvest(operation.path, response.json())

    run()


def test_every_operation_answers_as_documented(live):
    schema = schemathesis.openapi.from_url(f"{live.url}/api/openapi.json", config=CONFIG)
    operations = sorted((r.ok() for r in schema.get_all_operations()), key=lambda op: METHOD_ORDER[op.method.upper()])
    known, seen = Known(item_params(schema.raw_schema)), Counter()
    failures: list[str] = []
    started, server_cpu = time.process_time(), live.cpu_seconds()
    with requests.Session() as http:
        for operation in operations:
            for mode in MODES:
                try:
                    _fuzz(operation, mode, live.url, _key_for(operation, live.keys), http, known, seen)
                except Unsatisfiable:      # no input of this operation can be invalid (no parameters)
                    assert mode is GenerationMode.NEGATIVE, operation.label
                except (Exception, BaseExceptionGroup) as exc:  # every operation is tried; all failures reported
                    failures.append(f"== {operation.label} ({mode.value})\n{exc}")
    print(f"fuzz: {len(operations)} operations (all but the document's own), {EXAMPLES} examples each; answers {dict(sorted(seen.items()))}; "
          f"known ids {dict((k, len(v)) for k, v in sorted(known.ids.items()))}; CPU seconds: tests "
          f"{time.process_time() - started:.1f}, service {live.cpu_seconds() - server_cpu:.1f}")
    assert not failures, f"{len(failures)} operations answered outside the document:\n\n" + "\n\n".join(failures)
