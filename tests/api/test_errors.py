"""One JSON error shape; limits of docs/api.md."""

from __future__ import annotations

import io
import json

import pytest

from tests.conftest import auth
from webapp.client_reads import ClientTooSlow


def test_unknown_route_is_json_404(client):
    resp = client.get("/api/nothing-here")
    assert resp.status_code == 404
    assert resp.is_json and resp.json["code"] == "not_found" and resp.json["error"]


def test_wrong_method_is_json_405(client, tenant):
    resp = client.delete("/api/settings", headers=auth(tenant.key))
    assert resp.status_code == 405
    assert resp.is_json and resp.json["error"] and resp.json["code"] == "not_found"   # the closed list of codes
    assert "GET" in resp.headers["Allow"]


def test_malformed_json_is_400_validation_failed(client, tenant):
    resp = client.patch("/api/settings", data=b"{not json", headers={**auth(tenant.key),
                        "Content-Type": "application/json"})
    assert resp.status_code == 400
    assert resp.json["code"] == "validation_failed"
    assert resp.json["details"][0]["field"] == "body"


def test_non_object_body_is_400(client, tenant):
    resp = client.patch("/api/settings", json=[1, 2], headers=auth(tenant.key))
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed"


def test_body_over_one_mebibyte_is_413(client, tenant):
    big = b'{"name": "' + b"x" * (1024 * 1024) + b'"}'
    resp = client.patch("/api/settings", data=big, headers={**auth(tenant.key),
                        "Content-Type": "application/json"})
    assert resp.status_code == 413
    assert resp.json["code"] == "payload_too_large"


def test_a_body_over_one_mebibyte_is_413_even_sent_in_chunks_or_to_a_route_reading_none(app, client, tenant):
    """A chunked body has no length ahead: it was cut at 1 MiB and the first 1 MiB acted on."""
    import http.client

    from tests.support.sse import AppServer

    event = b'{"events": [{"user_id": "chunky", "event": "signup"}]}'
    server = AppServer(app)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server.server_port, timeout=30)
        pieces = [event, b" " * (1024 * 1024), b" "]
        conn.request("POST", "/api/track", body=iter(pieces), encode_chunked=True,
                     headers={**auth(tenant.key), "Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 413, resp.read()
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", server.server.server_port, timeout=30)
        conn.request("POST", "/api/track", body=iter([event.replace(b"chunky", b"small")]), encode_chunked=True,
                     headers={**auth(tenant.key), "Content-Type": "application/json"})
        small = conn.getresponse()
        assert (small.status, json.loads(small.read())["accepted"]) == (200, 1)
        conn.close()
    finally:
        server.close()
    assert client.get("/api/customers/chunky", headers=auth(tenant.key)).status_code == 404
    big = b"token=x&pad=" + b"x" * (1024 * 1024)
    resp = client.post("/api/unsubscribe?token=abc", data=big,
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert (resp.status_code, resp.json["code"]) == (413, "payload_too_large")


class _StoppedBody(io.BytesIO):
    """A request body whose reads fail as the socket's would when nothing more comes."""

    def __init__(self, error: Exception):
        super().__init__()
        self.error = error

    def read(self, *_):
        raise self.error

    readinto = readline = read


@pytest.mark.parametrize("error, status, code", [
    (ClientTooSlow(1.0), 408, "validation_failed"),            # the API worker's bound on a read
    (TimeoutError("timed out"), 408, "validation_failed"),     # the embedded server's socket timeout
    (ConnectionResetError(104, "reset"), 400, "validation_failed"),   # the client went away
])
def test_a_body_that_stops_arriving_is_a_clear_answer(client, error, status, code, caplog):
    resp = client.post("/api/team/accept", input_stream=_StoppedBody(error), content_type="application/json",
                       environ_overrides={"CONTENT_LENGTH": "100"})   # announced, never sent
    assert resp.status_code == status and resp.json["code"] == code, resp.json
    assert "token" not in resp.json["error"]                  # the body was not judged: it never came
    assert not [r for r in caplog.records if r.exc_info]      # no traceback logged


def test_unexpected_error_is_json_500_without_trace(app, client, tenant, monkeypatch):
    from cs_daemon.tenants import service

    def boom(*a, **kw):
        raise RuntimeError("secret internals /path/to/file.py line 3")

    monkeypatch.setattr(service, "get", boom)
    app.config["PROPAGATE_EXCEPTIONS"] = False
    resp = client.get("/api/settings", headers=auth(tenant.key))
    assert resp.status_code == 500
    assert resp.json == {"error": "internal server error", "code": "internal"}
    assert b"Traceback" not in resp.data and b"secret internals" not in resp.data


def test_rate_limit_headers_and_429(client, tenant, clock):
    h = auth(tenant.key)
    first = client.get("/api/settings", headers=h)
    assert first.headers["X-RateLimit-Limit"] == "600"
    assert first.headers["X-RateLimit-Remaining"] == "599"
    reset = int(first.headers["X-RateLimit-Reset"])
    assert reset > clock.now().timestamp()
    for _ in range(599):
        assert client.get("/api/settings", headers=h).status_code == 200
    resp = client.get("/api/settings", headers=h)
    assert resp.status_code == 429
    assert resp.json["code"] == "rate_limited"
    assert int(resp.headers["Retry-After"]) >= 1
    assert resp.headers["X-RateLimit-Remaining"] == "0"
    # another key of the same tenant has its own budget; health is exempt
    assert client.get("/api/settings", headers=auth(tenant.issue())).status_code == 200
    assert "X-RateLimit-Limit" not in client.get("/api/health").headers
    clock.advance(seconds=61)
    assert client.get("/api/settings", headers=h).status_code == 200


def test_rate_limit_follows_plan(client, make_tenant):
    growth = make_tenant("Big", plan_tier="growth")
    resp = client.get("/api/settings", headers=auth(growth.key))
    assert resp.headers["X-RateLimit-Limit"] == "6000"


def test_refused_keys_give_back_every_cache_connection(client, tenant, rt, monkeypatch):
    """A request is counted while its key is looked up; a key refused with 401 (unknown,
    revoked) must still finish that count, or the cache's connections would leak."""
    from cs_daemon.auth import keys

    from cs_daemon.auth.models import ApiKey

    revoked = tenant.issue()
    with rt.session(tenant.id) as s:
        for key in s.query(ApiKey).filter(ApiKey.digest == keys.digest(revoked)):
            key.revoked_at = rt.now()
    for n in range(60):
        bad = revoked if n % 2 else keys.generate(False)
        assert client.get("/api/settings", headers=auth(bad)).status_code == 401
    assert client.get("/api/settings", headers=auth(tenant.key)).status_code == 200
    pool = getattr(getattr(rt.cache, "client", None), "connection_pool", None)
    if pool is not None:                                    # production mode: Redis
        assert not pool._in_use_connections and len(pool._available_connections) <= 2



@pytest.mark.parametrize("path", ["/api/track", "/api/playbooks", "/api/connectors/connector-a"])
def test_bodies_nested_too_deeply_are_refused_not_a_crash(client, tenant, path):
    """Python's JSON reader runs out of stack on deep nesting (it was a 500); past 100
    levels a body is refused as malformed."""
    h = {**auth(tenant.key), "Content-Type": "application/json"}
    for body in ("[" * 100_000, '{"events": ' + "[" * 5000 + "]" * 5000 + "}",
                 '{"name": "n", "x": ' + "[" * 100 + "]" * 100 + "}"):
        resp = client.post(path, headers=h, data=body)
        assert resp.status_code == 400 and resp.json["code"] == "validation_failed"
        assert resp.json["details"] == [{"field": "body", "message": "nested deeper than 100 levels"}]


def test_a_body_nested_100_levels_is_read(client, tenant):
    nested = 0
    for _ in range(96):       # the body's object, events, the event, properties: 100 in all
        nested = [nested]
    body = {"events": [{"user_id": "u", "event": "x", "properties": {"p": nested}}]}
    resp = client.post("/api/track", headers=auth(tenant.key), json=body)
    assert resp.status_code == 200 and resp.json["accepted"] == 1
