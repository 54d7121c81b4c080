"""Customers API (docs/scoring.md; paging: docs/api.md, "Other choices")."""

from __future__ import annotations

import base64
import time

import pytest

from tests.conftest import auth


def _track(client, key, *events):
    resp = client.post("/api/track", headers=auth(key), json={"events": list(events)})
    assert resp.status_code == 200, resp.json
    return resp.json


def test_create_is_201_then_200_with_the_existing_record(client, tenant):
    h = auth(tenant.key)
    resp = client.post("/api/customers", headers=h, json={
        "user_id": "u1", "email": "u1@example.com", "name": "Uno", "properties": {"plan": "pro", "team_size": 4}})
    assert resp.status_code == 201
    user = resp.json["user"]
    assert (user["id"], user["email"], user["name"], user["team_size"]) == ("u1", "u1@example.com", "Uno", 4)
    assert user["traits"] == {"plan": "pro"} and user["lifecycle_stage"] == "new"
    again = client.post("/api/customers", headers=h, json={"user_id": "u1", "name": "Changed"})
    assert again.status_code == 200
    assert again.json["user"]["name"] == "Uno"


@pytest.mark.parametrize("payload, field", [
    ({"email": "a@b.co"}, "user_id"), ({"user_id": ""}, "user_id"),
    ({"user_id": "x", "email": "not-an-email"}, "email"), ({"user_id": "x", "properties": 3}, "properties"),
])
def test_create_refuses_bad_input(client, tenant, payload, field):
    resp = client.post("/api/customers", headers=auth(tenant.key), json=payload)
    assert resp.status_code == 400 and field in [d["field"] for d in resp.json["details"]]
    assert client.get("/api/customers/stats", headers=auth(tenant.key)).json["stats"]["total"] == 0


def test_create_past_the_tracked_user_limit_is_403_plan_limit(client, tenant, rt):
    from cs_daemon.tenants.models import Tenant

    with rt.session() as s:
        s.get(Tenant, tenant.id).tracked_user_limit = 1
    h = auth(tenant.key)
    assert client.post("/api/customers", headers=h, json={"user_id": "a"}).status_code == 201
    resp = client.post("/api/customers", headers=h, json={"user_id": "b"})
    assert resp.status_code == 403
    assert resp.json["code"] == "plan_limit"
    assert (resp.json["current"], resp.json["limit"], resp.json["upgrade_to"]) == (1, 1, "starter")


def test_name_is_the_user_id_until_known(client, tenant):
    _track(client, tenant.key, {"user_id": "anon-7", "event": "viewed"})
    assert client.get("/api/customers/anon-7", headers=auth(tenant.key)).json["customer"]["name"] == "anon-7"


def test_detail_has_progress_segments_and_recent_events(client, tenant, clock):
    h = auth(tenant.key)
    client.patch("/api/settings", headers=h, json={"config": {"milestones": ["a", "b"]}})
    _track(client, tenant.key,
           {"user_id": "u1", "event": "a", "timestamp": "2026-11-01T08:00:00Z"},
           {"user_id": "u1", "event": "viewed", "timestamp": "2026-11-02T08:00:00Z", "properties": {"p": 1}})
    resp = client.get("/api/customers/u1", headers=h)
    assert resp.status_code == 200
    body = resp.json
    assert set(body) == {"customer", "events", "interventions", "decisions"}
    progress = body["customer"]["milestone_progress"]
    assert progress["milestones"] == [{"name": "a", "done": True}, {"name": "b", "done": False}]
    assert progress["done"] == 1 and progress["total"] == 2 and progress["percent"] == 50.0
    segments = [s["segment"] for s in body["customer"]["segment_memberships"]]
    assert f"stage:{body['customer']['lifecycle_stage']}" in segments and "active_30d" in segments
    events = body["events"]
    assert [e["event"] for e in events] == ["viewed", "a"]  # newest first
    assert set(events[0]) == {"id", "event", "properties", "timestamp", "received_at", "source", "test"}
    assert events[0]["properties"] == {"p": 1} and events[0]["source"] == "api"
    assert body["interventions"] == []


def test_detail_of_unknown_or_foreign_user_is_404(client, tenant, make_tenant):
    other = make_tenant("Globex")
    _track(client, other.key, {"user_id": "theirs", "event": "x"})
    for user in ("nobody", "theirs"):
        resp = client.get(f"/api/customers/{user}", headers=auth(tenant.key))
        assert resp.status_code == 404 and resp.json["code"] == "not_found"


def test_detail_of_a_user_id_with_a_slash(client, tenant):
    # the path id is the user id as sent in events, any string: "org/7" too
    _track(client, tenant.key, {"user_id": "org/7", "event": "x"})
    resp = client.get("/api/customers/org%2F7", headers=auth(tenant.key))
    assert resp.status_code == 200 and resp.json["customer"]["id"] == "org/7"
    assert client.get("/api/customers/org%2F8", headers=auth(tenant.key)).json["code"] == "not_found"
    assert client.get("/api/customers/stats", headers=auth(tenant.key)).json["stats"]["total"] == 1


def test_list_pages_with_a_cursor(client, tenant, clock):
    for i in range(5):
        _track(client, tenant.key, {"user_id": f"u{i}", "event": "x"})
        clock.advance(seconds=1)
    h = auth(tenant.key)
    first = client.get("/api/customers?limit=2", headers=h).json
    assert [c["id"] for c in first["customers"]] == ["u4", "u3"]
    assert first["customers"][0]["next_action"] is None
    second = client.get(f"/api/customers?limit=2&cursor={first['next_cursor']}", headers=h).json
    assert [c["id"] for c in second["customers"]] == ["u2", "u1"]
    third = client.get(f"/api/customers?limit=2&cursor={second['next_cursor']}", headers=h).json
    assert [c["id"] for c in third["customers"]] == ["u0"] and third["next_cursor"] is None
    assert len(client.get("/api/customers", headers=h).json["customers"]) == 5


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "limit=abc", "cursor=%%%"])
def test_list_refuses_bad_queries(client, tenant, query):
    resp = client.get(f"/api/customers?{query}", headers=auth(tenant.key))
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed"


def _cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


BAD_CURSORS = {
    "naive time": _cursor(b'["2026-11-02T09:30:00", "u1"]'),
    "a date only": _cursor(b'["2026-11-02", "u1"]'),
    "out of range once in UTC": _cursor(b'["0001-01-01T00:00:00+14:00", "u1"]'),
    "past the last year": _cursor(b'["9999-12-31T23:59:59-14:00", "u1"]'),
    "a number for the id": _cursor(b'["2026-11-02T09:30:00+00:00", 5]'),
    "NUL in the id": _cursor(b'["2026-11-02T09:30:00+00:00", "a\\u0000"]'),
    "a lone surrogate in the id": _cursor(b'["2026-11-02T09:30:00+00:00", "\\ud800"]'),
    "three items": _cursor(b'["2026-11-02T09:30:00+00:00", "u", 1]'),
    "an object": _cursor(b'{"a": 1, "b": 2}'),
    "not UTF-8": _cursor(b"\xff\xfe"),
    "not base64": "é",
}


@pytest.mark.parametrize("cursor", BAD_CURSORS.values(), ids=BAD_CURSORS.keys())
def test_a_malformed_or_naive_cursor_is_a_quick_400(client, tenant, cursor):
    _track(client, tenant.key, {"user_id": "u1", "event": "x"})
    started = time.monotonic()
    resp = client.get("/api/customers", query_string={"cursor": cursor}, headers=auth(tenant.key))
    assert time.monotonic() - started < 0.5
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed", resp.json
    assert [d["field"] for d in resp.json["details"]] == ["cursor"]
    assert resp.json["error"].startswith("invalid cursor")


def test_list_and_stats_never_mix_tenants(client, tenant, make_tenant):
    other = make_tenant("Globex")
    _track(client, tenant.key, {"user_id": "mine", "event": "x"})
    _track(client, other.key, {"user_id": "theirs", "event": "x"}, {"user_id": "theirs2", "event": "x"})
    assert [c["id"] for c in client.get("/api/customers", headers=auth(tenant.key)).json["customers"]] == ["mine"]
    assert client.get("/api/customers/stats", headers=auth(tenant.key)).json["stats"]["total"] == 1
    assert client.get("/api/customers/stats", headers=auth(other.key)).json["stats"]["total"] == 2


def test_stats_counts(client, tenant, clock):
    h = auth(tenant.key)
    _track(client, tenant.key, {"user_id": "a", "event": "x"}, {"user_id": "b", "event": "churned"})
    stats = client.get("/api/customers/stats", headers=h).json["stats"]
    assert stats["total"] == 2 and stats["active"] == 2 and stats["churned"] == 1 and stats["at_risk"] == 1


# -- a customer's interventions: the detail's list, the list's next_action -----------------

def _playbook(client, tenant, name):
    resp = client.post("/api/playbooks", headers=auth(tenant.key), json={"name": name})
    assert resp.status_code == 201, resp.json
    return resp.json["id"]


def _intervene(client, tenant, pid, user, channel="email", *, approve=False, reject=False):
    resp = client.post("/api/interventions", headers=auth(tenant.key),
                       json={"user_id": user, "playbook_id": pid, "channel": channel, "message_body": f"hi {user}"})
    assert resp.status_code == 201, resp.json
    iv_id = resp.json["id"]
    if approve:
        assert client.put(f"/api/interventions/{iv_id}/approve", headers=auth(tenant.key)).status_code == 200
    if reject:
        assert client.put(f"/api/interventions/{iv_id}/reject", headers=auth(tenant.key),
                          json={"reason": "no"}).status_code == 200
    return iv_id


def test_detail_lists_the_users_interventions_newest_first(client, tenant, make_tenant, clock):
    h = auth(tenant.key)
    _track(client, tenant.key, {"user_id": "u1", "event": "x"}, {"user_id": "u2", "event": "x"})
    pid = _playbook(client, tenant, "Onboarding")
    older = _intervene(client, tenant, pid, "u1", reject=True)
    clock.advance(seconds=60)
    _intervene(client, tenant, pid, "u2")
    newer = _intervene(client, tenant, pid, "u1", channel="in_app")
    assert client.post("/api/escalations", headers=h, json={
        "user_id": "u1", "playbook_id": pid, "severity": "High", "reason": "call them"}).status_code == 201
    other = make_tenant("Globex")   # the same user id elsewhere is another customer
    _track(client, other.key, {"user_id": "u1", "event": "x"})
    _intervene(client, other, _playbook(client, other, "Theirs"), "u1")

    body = client.get("/api/customers/u1", headers=h).json
    listed = {i["id"]: i for i in client.get("/api/interventions", headers=h).json["interventions"]}
    assert [i["id"] for i in body["interventions"]] == [newer, older]
    assert body["interventions"] == [listed[newer], listed[older]]   # the fields of GET /api/interventions
    assert (body["interventions"][1]["status"], body["interventions"][0]["channel"]) == ("rejected", "in_app")


def test_detail_lists_at_most_100_interventions(client, tenant, rt, clock):
    from cs_daemon.interventions import service as interventions

    _track(client, tenant.key, {"user_id": "u1", "event": "x"})
    pid = _playbook(client, tenant, "Nudges")
    made = []
    with rt.session(tenant.id) as s:
        for _ in range(101):
            clock.advance(seconds=1)
            made.append(interventions.create(s, tenant.id, user_id="u1", playbook_id=pid, channel="email",
                                             message_body=None, now=clock.now(), test=False).id)
    items = client.get("/api/customers/u1", headers=auth(tenant.key)).json["interventions"]
    assert [i["id"] for i in items] == made[::-1][:100]


def test_list_gives_each_customers_next_planned_or_approved_intervention(client, tenant, make_tenant, clock):
    h = auth(tenant.key)
    _track(client, tenant.key, *({"user_id": u, "event": "x"} for u in ("both", "planned", "done", "none", "esc")))
    welcome, rescue = _playbook(client, tenant, "Welcome"), _playbook(client, tenant, "Rescue")
    _intervene(client, tenant, welcome, "both", "email")
    first_planned = _intervene(client, tenant, welcome, "planned", "in_app")
    clock.advance(seconds=60)
    approved = _intervene(client, tenant, rescue, "both", "in_app", approve=True)   # approved goes first
    _intervene(client, tenant, rescue, "planned", "email")
    _intervene(client, tenant, welcome, "done", "email", reject=True)
    client.post("/api/escalations", headers=h, json={"user_id": "esc", "playbook_id": rescue, "severity": "Low",
                                                     "reason": "look"})
    other = make_tenant("Globex")
    _track(client, other.key, {"user_id": "none", "event": "x"})
    _intervene(client, other, _playbook(client, other, "Theirs"), "none")

    customers = {c["id"]: c["next_action"] for c in client.get("/api/customers", headers=h).json["customers"]}
    assert customers == {
        "both": {"channel": "in_app", "status": "approved", "playbook": "Rescue", "intervention_id": approved},
        "planned": {"channel": "in_app", "status": "planned", "playbook": "Welcome", "intervention_id": first_planned},
        "done": None, "none": None, "esc": None,
    }


def test_next_action_is_one_query_for_the_whole_page(client, tenant, rt):
    from tests.support.sql import Watching

    users = [f"u{i:02}" for i in range(30)]
    _track(client, tenant.key, *({"user_id": u, "event": "x"} for u in users))
    pid = _playbook(client, tenant, "Welcome")
    for user in users:
        _intervene(client, tenant, pid, user)
    statements: list[str] = []

    def count(_conn, _cursor, statement, *_args):
        statements.append(statement)

    def page(limit):
        statements.clear()
        resp = client.get(f"/api/customers?limit={limit}", headers=auth(tenant.key))
        assert resp.status_code == 200
        assert all(c["next_action"]["playbook"] == "Welcome" for c in resp.json["customers"])
        return list(statements)

    with Watching(rt.settings, count):
        page(5)   # warm: the key is remembered after its first use
        small, large = page(2), page(30)
    assert len(small) == len(large)   # the page's size adds no statement
    assert len([s for s in small if "interventions" in s.lower()]) == 1
    assert len([s for s in large if "interventions" in s.lower()]) == 1


def test_one_201_for_one_new_customer_created_by_many_requests_at_once(app, tenant):
    """Real concurrent requests to a real server: each request found no customer, and each
    answered 201 created, though one row was made."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import requests

    from tests.support.sse import AppServer

    server = AppServer(app)
    start = threading.Barrier(10)

    def create(_):
        start.wait()
        return requests.post(f"{server.url}/api/customers", headers=auth(tenant.key), json={"user_id": "dup"},
                             timeout=30)

    try:
        with ThreadPoolExecutor(10) as pool:
            codes = sorted(r.status_code for r in pool.map(create, range(10)))
    finally:
        server.close()
    assert codes == [200] * 9 + [201], codes
