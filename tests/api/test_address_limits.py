"""The keyless endpoints are limited per client address (docs/api.md, Rate limits): each
endpoint counts each address in a one-minute window, shared through Redis by every API
process in production; X-Forwarded-For counts only from a trusted proxy."""

from __future__ import annotations

import ipaddress
import uuid

import pytest

from cs_daemon import addresses
from cs_daemon.runtime import Runtime
from webapp import create_app

LIMIT = 3
TOKEN = "bm90LWEtdG9rZW4.c2lnbmF0dXJl"     # well formed, signed by nobody

# (method, path, request keywords): every endpoint that takes no key, answering whatever
# a stranger's request gets (400, 401, 404, 503): each is counted all the same
KEYLESS = [
    ("GET", "/api/team/accept", {"query_string": {"token": str(uuid.uuid4())}}),
    ("POST", "/api/team/accept", {"json": {"token": str(uuid.uuid4())}}),
    ("GET", "/api/unsubscribe", {"query_string": {"token": TOKEN}}),
    ("POST", "/api/unsubscribe", {"query_string": {"token": TOKEN}}),
    ("GET", "/api/in-app/stream", {"query_string": {"token": TOKEN}}),
    ("POST", "/api/in-app/events", {"json": {"token": TOKEN, "intervention_id": "x", "action": "clicked"}}),
    ("POST", "/api/billing/webhook", {"data": b"{}", "headers": {"Stripe-Signature": "t=1,v1=00"}}),
    ("GET", "/api/openapi.json", {}),
]


def _app(settings, clock, **update):
    limits = {"cs_address_rate_limit": LIMIT, "cs_health_rate_limit": LIMIT * 2, **update}
    return create_app(runtime=Runtime(settings.model_copy(update=limits), clock))


def _call(client, method, path, kw, address="198.51.100.7", **extra):
    kw = {**kw, "headers": {**kw.get("headers", {}), **extra.pop("headers", {})}}
    return client.open(path, method=method, environ_base={"REMOTE_ADDR": address}, **kw, **extra)


def _refused(resp, limit=LIMIT):
    assert resp.status_code == 429, resp.get_data(as_text=True)
    assert resp.json["code"] == "rate_limited" and f"{limit} requests a minute" in resp.json["error"]
    assert 1 <= int(resp.headers["Retry-After"]) <= 60


@pytest.mark.parametrize("method,path,kw", KEYLESS, ids=[f"{m} {p}" for m, p, _ in KEYLESS])
def test_each_keyless_endpoint_is_limited_per_address(settings, clock, method, path, kw):
    client = _app(settings, clock).test_client()
    for _ in range(LIMIT):
        assert _call(client, method, path, kw).status_code != 429
    _refused(_call(client, method, path, kw))
    assert _call(client, method, path, kw, address="198.51.100.8").status_code != 429   # another address
    clock.advance(seconds=60)                                                           # the next window
    assert _call(client, method, path, kw).status_code != 429


def test_endpoints_count_apart_and_health_has_its_own_higher_limit(settings, clock):
    client = _app(settings, clock).test_client()
    method, path, kw = KEYLESS[2]
    for _ in range(LIMIT + 1):
        _call(client, method, path, kw)
    _refused(_call(client, method, path, kw))
    other = KEYLESS[0]
    assert _call(client, *other).status_code == 404                  # another endpoint: its own count
    for _ in range(LIMIT * 2):
        assert _call(client, "GET", "/api/health", {}).status_code in (200, 503)
    _refused(_call(client, "GET", "/api/health", {}), LIMIT * 2)


@pytest.mark.parametrize("backend", ["postgres"])
def test_api_processes_share_the_count_in_production(settings, clock):
    first, second = _app(settings, clock).test_client(), _app(settings, clock).test_client()
    method, path, kw = KEYLESS[1]
    for _ in range(LIMIT):
        _call(first, method, path, kw)
    _refused(_call(second, method, path, kw))


def test_x_forwarded_for_counts_only_from_a_trusted_proxy(settings, clock):
    method, path, kw = KEYLESS[1]
    direct = _app(settings, clock).test_client()
    for n in range(LIMIT):              # a client cannot get a fresh count by naming another address
        _call(direct, method, path, kw, headers={"X-Forwarded-For": f"203.0.113.{n}"})
    _refused(_call(direct, method, path, kw, headers={"X-Forwarded-For": "203.0.113.99"}))

    proxied = _app(settings, clock, cs_trusted_proxies=(ipaddress.ip_network("10.0.0.0/8"),)).test_client()
    for _ in range(LIMIT):              # behind the proxy, the client it names is what counts
        _call(proxied, method, path, kw, address="10.1.2.3", headers={"X-Forwarded-For": "192.0.2.1"})
    _refused(_call(proxied, method, path, kw, address="10.1.2.3", headers={"X-Forwarded-For": "192.0.2.1"}))
    # what the client wrote to the left of the proxy's entry changes nothing
    _refused(_call(proxied, method, path, kw, address="10.9.9.9",
                   headers={"X-Forwarded-For": "198.18.0.1, 192.0.2.1"}))
    assert _call(proxied, method, path, kw, address="10.1.2.3",
                 headers={"X-Forwarded-For": "192.0.2.2"}).status_code == 404


def test_the_client_address_of_a_request():
    trusted = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::1/128"))
    assert addresses.client("192.0.2.1", "203.0.113.5", ()) == "192.0.2.1"
    assert addresses.client("10.0.0.1", "203.0.113.5", trusted) == "203.0.113.5"
    assert addresses.client("10.0.0.1", "198.18.0.1, 203.0.113.5, 10.0.0.2", trusted) == "203.0.113.5"
    assert addresses.client("10.0.0.1", "", trusted) == "10.0.0.1"
    assert addresses.client("10.0.0.1", "junk, 10.0.0.3", trusted) == "10.0.0.3"
    assert addresses.client("2001:db8::1", None, trusted) == "2001:db8::/64"
    assert addresses.client("2001:db8::2", None, ()) == addresses.client("2001:db8::ffff", None, ())
    assert addresses.client("::ffff:192.0.2.9", None, ()) == "192.0.2.9"
