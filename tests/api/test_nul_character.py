"""The NUL character (U+0000) is valid in JSON strings and URLs, but no PostgreSQL text or
JSON value can hold it: every route, found from the OpenAPI document, refuses it in a
body string (400), a path id (404) or a query value (400) rather than fail with a 500."""

from __future__ import annotations

import re

from tests.conftest import auth

NUL = "a\u0000b"
# enough for most bodies to pass validation up to the field under test
BASE = {"name": "n", "user_id": "u", "channel": "email", "email": "a@b.example", "url": "https://example.com/h"}


def _schema(doc, schema):
    if "$ref" in schema:
        return doc["components"]["schemas"][schema["$ref"].split("/")[-1]]
    return schema


def _string_fields(doc, schema):
    for name, prop in (_schema(doc, schema).get("properties") or {}).items():
        prop = _schema(doc, prop)
        if "string" in {prop.get("type")} | {_schema(doc, a).get("type") for a in prop.get("anyOf", [])}:
            yield name


def _operations(client):
    doc = client.get("/api/openapi.json").json
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            yield doc, path, method.upper(), op


def test_no_route_fails_on_a_nul_character(client, tenant):
    h = auth(tenant.key)
    failures, tried = [], 0
    for doc, path, method, op in _operations(client):
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        if "{" in path:
            tried += 1
            resp = client.open(re.sub(r"\{[^}]+\}", "a%00b", path), method=method, headers=h, json={})
            if resp.status_code >= 500 or (resp.status_code == 200 and method != "GET"):
                failures.append((method, path, "path", resp.status_code))
        body = (op.get("requestBody") or {}).get("content", {}).get("application/json", {}).get("schema")
        for field in _string_fields(doc, body) if body else ():
            tried += 1
            resp = client.open(concrete, method=method, headers=h, json={**BASE, field: NUL})
            if resp.status_code >= 500 or resp.status_code < 400:
                failures.append((method, path, field, resp.status_code))
        for param in (p for p in op.get("parameters", []) if p.get("in") == "query"):
            tried += 1
            resp = client.open(f"{concrete}?{param['name']}=a%00b", method=method, headers=h)
            if resp.status_code >= 500:
                failures.append((method, path, f"?{param['name']}", resp.status_code))
    assert tried > 60 and failures == []


def test_a_nul_character_is_refused_with_a_clear_error_and_nothing_stored(client, tenant, rt):
    h = auth(tenant.key)
    for events in ([{"user_id": NUL, "event": "x"}], [{"user_id": "u", "event": "x", "properties": {"k": NUL}}],
                   [{"user_id": "u", "event": "x", "properties": {NUL: 1}}]):
        resp = client.post("/api/track", headers=h, json={"events": events})
        assert resp.status_code == 400 and resp.json["code"] == "validation_failed"
        assert resp.json["details"] == [{"field": "body",
                                         "message": "strings may not contain \\u0000 (the NUL character)"}]
    assert client.get("/api/customers?limit=1", headers=h).json["customers"] == []
    resp = client.get("/api/customers/a%00b", headers=h)
    assert resp.status_code == 404 and resp.json["code"] == "not_found"
    resp = client.get("/api/external/actions?user_id=a%00b", headers=h)
    assert resp.status_code == 400 and resp.json["details"] == [
        {"field": "user_id", "message": "may not contain the NUL character"}]
    # the escape written as text (a backslash, then u0000) is an ordinary string
    resp = client.post("/api/track", headers=h, json={"events": [{"user_id": "u", "event": "x",
                                                                   "properties": {"k": "\\u0000"}}]})
    assert resp.status_code == 200 and resp.json["accepted"] == 1
