"""A lone UTF-16 surrogate ("\\ud800" in JSON, without its pair) is no character: neither
database nor any receiver can hold it. Every body string of every route, found from the
OpenAPI document, refuses it with a 400 rather than fail with a 500, and nothing is
stored; a pair that makes one character (an emoji) is stored as usual."""

from __future__ import annotations

import json
import re
import time

from tests.api.test_nul_character import BASE, _operations, _string_fields
from tests.conftest import auth

LONE = "a\ud800b"
MESSAGE = "strings may not contain a lone UTF-16 surrogate (\\ud800 to \\udfff without its pair)"


def test_no_route_fails_on_a_lone_surrogate(client, tenant):
    h = auth(tenant.key)
    failures, tried = [], 0
    for doc, path, method, op in _operations(client):
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        body = (op.get("requestBody") or {}).get("content", {}).get("application/json", {}).get("schema")
        for field in _string_fields(doc, body) if body else ():
            tried += 1
            resp = client.open(concrete, method=method, headers=h, json={**BASE, field: LONE})
            if resp.status_code >= 500 or resp.status_code < 400:
                failures.append((method, path, field, resp.status_code))
    assert tried > 40 and failures == []


def _refused(resp):
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert resp.json["code"] == "validation_failed"
    assert resp.json["details"] == [{"field": "body", "message": MESSAGE}]


def test_a_lone_surrogate_anywhere_in_a_body_is_a_quick_400_and_nothing_is_stored(client, tenant):
    h = auth(tenant.key)
    bodies = [
        ("POST", "/api/track", {"events": [{"user_id": LONE, "event": "x"}]}),
        ("POST", "/api/track", {"events": [{"user_id": "u", "event": "x", "properties": {"k": ["ok", LONE]}}]}),
        ("POST", "/api/track", {"events": [{"user_id": "u", "event": "x", "properties": {"\udc00": 1}}]}),
        ("POST", "/api/playbooks", {"name": LONE}),
        ("POST", "/api/playbooks", {"name": "n", "strategy_hints": {"goal": LONE}}),
        ("PATCH", "/api/settings", {"config": {"brand": {"voice": LONE}}}),
        ("PATCH", "/api/settings", {"name": LONE}),
    ]
    before = client.get("/api/settings", headers=h).json
    for method, path, body in bodies:
        started = time.monotonic()
        _refused(client.open(path, method=method, headers=h, json=body))
        assert time.monotonic() - started < 0.5
    assert client.get("/api/customers?limit=1", headers=h).json["customers"] == []
    assert client.get("/api/playbooks", headers=h).json["playbooks"] == []
    assert client.get("/api/settings", headers=h).json == before
    # the upper-case escape, raw in the text, is the same
    raw = b'{"events": [{"user_id": "u", "event": "x", "properties": {"k": "\\uDBFF"}}]}'
    _refused(client.post("/api/track", headers={**h, "Content-Type": "application/json"}, data=raw))


def test_a_surrogate_pair_is_one_character_and_is_stored(client, tenant):
    h = auth(tenant.key)
    resp = client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u\U0001F600", "event": "x", "properties": {"mood": "\ud83d\ude00"}}]})
    assert resp.status_code == 200 and resp.json["accepted"] == 1
    assert json.dumps({"events": [{"user_id": "\U0001F600"}]}).count("\\ud83d") == 1     # sent as a pair
    [customer] = client.get("/api/customers", headers=h).json["customers"]
    assert customer["id"] == "u\U0001F600"


def test_a_surrogate_in_a_path_id_or_a_query_value_is_never_a_500(client, tenant):
    """Its UTF-8-like encoding (%ED%A0%80) is not UTF-8: the server reads it as U+FFFD, so
    a path names nothing (404) and a query value is what the route says of it (400)."""
    h = auth(tenant.key)
    resp = client.get("/api/customers/%ED%A0%80", headers=h)
    assert resp.status_code == 404 and resp.json["code"] == "not_found"
    resp = client.get("/api/customers?cursor=%ED%A0%80", headers=h)
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "cursor"
