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
import time
from collections import Counter

import pytest
import requests
import schemathesis
from schemathesis import GenerationMode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance, negative_data_rejection, response_schema_conformance, status_code_conformance,
)

from tests.support.daemon import running_daemon
from tests.support.stripe_server import StripeServer, sign

EXAMPLES = int(os.environ.get("CS_FUZZ_EXAMPLES", "10"))   # per operation and per mode (valid, invalid input)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          negative_data_rejection]
MODES = [GenerationMode(m) for m in os.environ.get("CS_FUZZ_MODES", "positive,negative").split(",")]
# The API ignores request fields and query parameters it does not know (docs/api.md,
# Fuzzing), so sending one is not invalid input that must be refused.
CONFIG = schemathesis.Config.from_dict({"generation": {"allow-extra-parameters": False}})
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


class Known:
    """Ids the service answered so far (in 2xx bodies), by the name a path or a body field
    gives them, so generated requests can name things that exist as well as things that
    do not. An `id` is named after the object holding it (`{"playbook": {"id": …}}` or
    `{"deliveries": [{"id": …}]}` give playbook_id, delivery_id) and after the path
    parameter of the answering collection (POST /api/external/action-types: type_id)."""

    def __init__(self, item_params: dict[str, str]):
        self.item_params = item_params
        self.ids: dict[str, list[str]] = {}

    def harvest(self, path: str, body) -> None:
        top = self.item_params.get(path)
        self._walk(body, (top,), top)

    def _walk(self, node, names: tuple, top: str | None) -> None:
        if isinstance(node, list):
            for item in node:
                self._walk(item, names, top)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key == "id" or (key.endswith("_id") and isinstance(value, str)):
                    for name in names if key == "id" else (key,):
                        self._add(name, value)
                else:
                    self._walk(value, (_singular(key) + "_id", top) if top else (_singular(key) + "_id",), None)

    def _add(self, name: str | None, value) -> None:
        if name and isinstance(value, str) and value and value not in self.ids.setdefault(name, []):
            self.ids[name].append(value)

    def choose(self, case, pick: int) -> None:
        """Replace some path parameters and top-level body fields by known ids (which,
        and which id, follow `pick`, so a run is the same every time)."""
        fields = [(case.path_parameters, name) for name in sorted(case.path_parameters or {})]
        if isinstance(case.body, dict):
            fields += [(case.body, name) for name in sorted(case.body) if name in self.ids]
        for i, (where, name) in enumerate(fields):
            known = self.ids.get(name)
            if known and (pick >> 2 * i) & 3:      # three times in four
                where[name] = known[(pick >> 12) % len(known)]


def _singular(word: str) -> str:
    return word[:-3] + "y" if word.endswith("ies") else word.removesuffix("s")


def _item_params(schema) -> dict[str, str]:
    """Each collection path and the parameter naming one of its items: /api/playbooks →
    playbook_id (from /api/playbooks/{playbook_id})."""
    found = {}
    for path in schema.raw_schema["paths"]:
        head, _, last = path.rpartition("/")
        if last.startswith("{") and last.endswith("}") and "{" not in head:
            found[head] = last[1:-1]
    return found


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
        headers = {"Authorization": f"Bearer {key}", **extra.pop("headers", {})}
        response = case.call_and_validate(base_url=base_url, session=http, headers=headers, checks=CHECKS,
                                          timeout=30, **extra)
        seen[response.status_code // 100 * 100] += 1
        if response.status_code < 300 and "json" in response.headers.get("content-type", [""])[0]:
            known.harvest(operation.path, response.json())

    run()


def test_every_operation_answers_as_documented(live):
    schema = schemathesis.openapi.from_url(f"{live.url}/api/openapi.json", config=CONFIG)
    operations = sorted((r.ok() for r in schema.get_all_operations()), key=lambda op: METHOD_ORDER[op.method.upper()])
    known, seen = Known(_item_params(schema)), Counter()
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
    print(f"fuzz: {len(operations)} operations, {EXAMPLES} examples each; answers {dict(sorted(seen.items()))}; "
          f"known ids {dict((k, len(v)) for k, v in sorted(known.ids.items()))}; CPU seconds: tests "
          f"{time.process_time() - started:.1f}, service {live.cpu_seconds() - server_cpu:.1f}")
    assert not failures, f"{len(failures)} operations answered outside the document:\n\n" + "\n\n".join(failures)
