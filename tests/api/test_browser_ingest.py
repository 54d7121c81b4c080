"""What the JS SDK needs from a browser (docs/sdk.md): `navigator.sendBeacon`
posts a text/plain body with an ingest-only key in `?api_key=`, and /api/track and the
in-app stream answer CORS preflights and expose Retry-After."""

from __future__ import annotations

import json

from sqlalchemy import select

from cs_daemon.customers.models import Event
from tests.conftest import auth

BEACON = json.dumps({"events": [{"user_id": "u1", "event": "page_hidden", "idempotency_key": "b1"}]})


def _stored(rt, tenant_id) -> list[str]:
    with rt.session(tenant_id) as s:
        return [e.event for e in s.scalars(select(Event))]


def test_a_beacon_with_an_ingest_only_key_in_the_url_is_ingested(client, tenant, rt):
    key = tenant.issue("editor", ["ingest"])
    resp = client.post(f"/api/track?api_key={key}", data=BEACON, content_type="text/plain;charset=UTF-8")
    assert resp.status_code == 200, resp.json
    assert resp.json == {"accepted": 1, "duplicates": 0, "over_limit": 0}
    assert _stored(rt, tenant.id) == ["page_hidden"]


def test_a_key_that_can_do_more_than_ingest_is_refused_in_the_url(client, tenant, rt):
    wide = [tenant.key, tenant.issue("editor", ["ingest", "read"])]
    for key in wide:
        resp = client.post(f"/api/track?api_key={key}", data=BEACON, content_type="text/plain")
        assert resp.status_code == 403 and resp.json["code"] == "forbidden", resp.json
        assert "ingest permission" in resp.json["error"]
    assert _stored(rt, tenant.id) == []
    # the same key as a bearer is fine
    assert client.post("/api/track", headers=auth(tenant.key), data=BEACON).status_code == 200


def test_an_unknown_key_in_the_url_is_401_and_it_works_nowhere_else(client, tenant):
    resp = client.post("/api/track?api_key=rt_live_" + "x" * 32, data=BEACON, content_type="text/plain")
    assert resp.status_code == 401 and resp.json["code"] == "unauthorized"
    key = tenant.issue("editor", ["ingest"])
    resp = client.post(f"/api/external/events?api_key={key}", json={"events": []})
    assert resp.status_code == 401


def test_browser_paths_answer_preflights_with_cors_headers(client):
    for path, method in (("/api/track", "POST"), ("/api/in-app/stream", "GET")):
        resp = client.options(path, headers={"Origin": "https://app.example", "Access-Control-Request-Method": method,
                                             "Access-Control-Request-Headers": "authorization, content-type"})
        assert resp.status_code == 200, path
        assert resp.headers["Access-Control-Allow-Origin"] == "*"
        allowed = {h.strip().lower() for h in resp.headers["Access-Control-Allow-Headers"].split(",")}
        assert {"authorization", "content-type", "last-event-id"} <= allowed
        assert method in resp.headers["Access-Control-Allow-Methods"]


def test_track_answers_expose_retry_after_even_on_errors_and_other_paths_get_no_cors(client, tenant):
    ok = client.post("/api/track", headers=auth(tenant.key), data=BEACON)
    bad = client.post("/api/track", headers=auth(tenant.key), json={"events": []})
    assert (ok.status_code, bad.status_code) == (200, 400)
    for resp in (ok, bad):
        assert resp.headers["Access-Control-Allow-Origin"] == "*"
        assert "Retry-After" in resp.headers["Access-Control-Expose-Headers"]
    other = client.get("/api/customers", headers=auth(tenant.key))
    assert other.status_code == 200 and "Access-Control-Allow-Origin" not in other.headers
