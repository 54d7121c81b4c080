"""Playbooks API (docs/playbooks.md)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from cs_daemon.interventions.models import Intervention
from tests.conftest import auth
from tests.support.sql import Statements

GOOD = {
    "name": "Nudge stalled onboarding",
    "lifecycle_area": "onboarding",
    "entry_conditions": {"trigger": {"event": "signed_up"},
                         "all": [{"field": "engagement_score", "op": "lt", "value": 40}]},
    "constraints": {"channels": ["email", "in_app"], "max_per_user": 3, "cooldown_hours": 24,
                    "quiet_hours": {"start": "22:00", "end": "07:00", "timezone": "Europe/Berlin"},
                    "min_confidence": 0.5, "require_approval": True, "unknown": "dropped"},
    "strategy_hints": {"goal": "first project", "tone": "warm", "priority": 5,
                       "escalate": {"severity": "High"}},
}


def test_create_is_draft_and_listed_with_success_rate(client, tenant):
    h = auth(tenant.key)
    resp = client.post("/api/playbooks", headers=h, json=GOOD)
    assert resp.status_code == 201
    body = resp.json
    assert body["status"] == "draft" and body["name"] == GOOD["name"] and body["id"] and body["created_at"]
    assert "unknown" not in body["constraints"]
    assert body["constraints"]["quiet_hours"]["timezone"] == "Europe/Berlin"
    listed = client.get("/api/playbooks", headers=h).json["playbooks"]
    assert [p["id"] for p in listed] == [body["id"]]
    assert listed[0]["success_rate"] is None


def test_defaults_are_empty_objects(client, tenant):
    body = client.post("/api/playbooks", headers=auth(tenant.key), json={"name": "Bare"}).json
    assert (body["entry_conditions"], body["exit_conditions"], body["constraints"], body["strategy_hints"]) == (
        {}, {}, {}, {})


@pytest.mark.parametrize("payload, field", [
    ({"name": ""}, "name"), ({}, "name"),
    ({"name": "x", "entry_conditions": {"all": [{"field": "bogus", "op": "eq", "value": 1}]}},
     "entry_conditions.all[0].field"),
    ({"name": "x", "exit_conditions": {"any": [{"field": "health", "op": "near", "value": 1}]}},
     "exit_conditions.any[0].op"),
    ({"name": "x", "constraints": {"channels": ["fax"]}}, "constraints.channels[0]"),
    ({"name": "x", "constraints": {"quiet_hours": {"start": "25:00", "end": "07:00"}}}, "constraints.quiet_hours.start"),
    ({"name": "x", "constraints": {"quiet_hours": {"start": "22:00", "end": "07:00", "timezone": "Mars/Base"}}},
     "constraints.quiet_hours.timezone"),
    ({"name": "x", "constraints": {"min_confidence": 2}}, "constraints.min_confidence"),
    ({"name": "x", "strategy_hints": {"escalate": {"severity": "Urgent"}}}, "strategy_hints.escalate.severity"),
])
def test_bad_playbooks_are_refused_naming_the_field(client, tenant, payload, field):
    resp = client.post("/api/playbooks", headers=auth(tenant.key), json=payload)
    assert resp.status_code == 400
    assert field in [d["field"] for d in resp.json["details"]]
    assert client.get("/api/playbooks", headers=auth(tenant.key)).json["playbooks"] == []


def test_plan_limit_counts_non_archived_playbooks(client, tenant):
    h = auth(tenant.key)
    ids = [client.post("/api/playbooks", headers=h, json={"name": f"p{i}"}).json["id"] for i in range(3)]
    resp = client.post("/api/playbooks", headers=h, json={"name": "one too many"})
    assert resp.status_code == 403
    assert resp.json["code"] == "plan_limit"
    assert (resp.json["current"], resp.json["limit"], resp.json["upgrade_to"]) == (3, 3, "starter")
    assert client.delete(f"/api/playbooks/{ids[0]}", headers=h).json == {"archived": True}
    assert client.post("/api/playbooks", headers=h, json={"name": "fits again"}).status_code == 201
    # out of the archive is one more playbook: refused at the limit, and nothing changes
    resp = client.put(f"/api/playbooks/{ids[0]}/status", headers=h, json={"status": "active"})
    assert resp.status_code == 403 and resp.json["code"] == "plan_limit" and resp.json["current"] == 3, resp.json
    statuses = {p["id"]: p["status"] for p in client.get("/api/playbooks", headers=h).json["playbooks"]}
    assert statuses[ids[0]] == "archived"
    assert client.delete(f"/api/playbooks/{ids[1]}", headers=h).status_code == 200
    resp = client.put(f"/api/playbooks/{ids[0]}/status", headers=h, json={"status": "active"})
    assert resp.status_code == 200 and resp.json["status"] == "active"
    assert client.put(f"/api/playbooks/{ids[2]}/status", headers=h, json={"status": "paused"}).status_code == 200


def test_scale_plan_has_no_playbook_limit(client, make_tenant):
    big = make_tenant("Big", plan_tier="scale")
    for i in range(12):
        assert client.post("/api/playbooks", headers=auth(big.key), json={"name": f"p{i}"}).status_code == 201


def test_update_status_and_archive(client, tenant, clock):
    h = auth(tenant.key)
    pid = client.post("/api/playbooks", headers=h, json=GOOD).json["id"]
    resp = client.put(f"/api/playbooks/{pid}", headers=h, json={"name": "Renamed", "strategy_hints": {"tone": "brief"}})
    assert resp.status_code == 200
    assert resp.json["name"] == "Renamed" and resp.json["strategy_hints"] == {"tone": "brief"}
    assert resp.json["entry_conditions"] == GOOD["entry_conditions"]  # untouched fields stay
    clock.advance(minutes=5)
    for status in ("active", "paused", "archived", "draft", "active"):
        resp = client.put(f"/api/playbooks/{pid}/status", headers=h, json={"status": status})
        assert resp.status_code == 200 and resp.json["status"] == status
    assert resp.json["status_changed_at"].startswith("2026-11-02T09:35")
    assert client.put(f"/api/playbooks/{pid}/status", headers=h, json={"status": "live"}).status_code == 400
    assert client.delete(f"/api/playbooks/{pid}", headers=h).status_code == 200
    [listed] = client.get("/api/playbooks", headers=h).json["playbooks"]
    assert listed["status"] == "archived"


def test_unknown_or_foreign_playbook_is_404(client, tenant, make_tenant):
    other = make_tenant("Other")
    pid = client.post("/api/playbooks", headers=auth(other.key), json={"name": "theirs"}).json["id"]
    h = auth(tenant.key)
    for path in (f"/api/playbooks/{pid}", "/api/playbooks/nope"):
        assert client.put(path, headers=h, json={"name": "x"}).status_code == 404
        assert client.delete(path, headers=h).status_code == 404
        assert client.put(f"{path}/status", headers=h, json={"status": "active"}).status_code == 404
    assert client.get("/api/playbooks", headers=h).json["playbooks"] == []


def test_viewer_may_list_but_not_write(client, tenant):
    viewer = tenant.issue("viewer", ["full"])
    assert client.get("/api/playbooks", headers=auth(viewer)).status_code == 200
    assert client.post("/api/playbooks", headers=auth(viewer), json={"name": "x"}).status_code == 403


def test_success_rate_is_positive_over_decided_outcomes(client, tenant, rt):
    h = auth(tenant.key)
    pid = client.post("/api/playbooks", headers=h, json={"name": "p"}).json["id"]
    with rt.session(tenant.id) as s:
        for outcome in ("positive", "positive", "negative", "neutral", None, "pending"):
            s.add(Intervention(user_id="u", playbook_id=pid, status="delivered", channel="email",
                               outcome=outcome, planned_at=rt.now(), updated_at=rt.now()))
        s.add(Intervention(user_id="u", playbook_id=pid, status="delivered", channel="email",
                           outcome="positive", test=True, planned_at=rt.now(), updated_at=rt.now()))
    [listed] = client.get("/api/playbooks", headers=h).json["playbooks"]
    assert listed["success_rate"] == 0.5


def test_preview_count(client, tenant):
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [
        {"user_id": "a", "event": "$identify", "properties": {"plan": "pro"}},
        {"user_id": "a", "event": "invited_teammate"},
        {"user_id": "b", "event": "$identify", "properties": {"plan": "free"}},
        {"user_id": "c", "event": "viewed"}]})
    def count(tree):
        resp = client.post("/api/playbooks/preview-count", headers=h, json={"entry_conditions": tree})
        assert resp.status_code == 200, resp.json
        return resp.json["matching_users"]

    assert count({}) == 3
    assert count({"field": "traits.plan", "op": "eq", "value": "pro"}) == 1
    assert count({"event": "invited_teammate", "count": {"op": "eq", "value": 0}}) == 2
    assert count({"trigger": {"event": "x"}, "any": [{"field": "traits.plan", "op": "exists", "value": True}]}) == 2
    resp = client.post("/api/playbooks/preview-count", headers=h, json={"entry_conditions": {"not": []}})
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "entry_conditions.not"
    assert client.post("/api/playbooks/preview-count", headers=h, json={}).status_code == 400


UNDER_ANY = {"any": [{"field": "risk_level", "op": "eq", "value": "high"},
                     {"not": {"event": "session_started", "within_days": 7}}]}


def test_preview_count_gives_postgres_work_mem_to_hash_event_subqueries(client, tenant, rt, backend):
    """An event clause under `any` is a correlated subquery: with the default 4 MB of
    work_mem PostgreSQL probes the events index once per customer (4.4 s for 1M users in
    bench/preview_count.py) instead of hashing the matching users once (1.6 s)."""
    with Statements(rt.settings) as watched:
        resp = client.post("/api/playbooks/preview-count", headers=auth(tenant.key),
                           json={"entry_conditions": UNDER_ANY})
    seen = watched.seen
    assert resp.status_code == 200 and resp.json["matching_users"] == 0
    sets = [i for i, s in enumerate(seen) if s.startswith("SET LOCAL work_mem")]
    if backend == "embedded":
        assert sets == []
        return
    count = next(i for i, s in enumerate(seen) if "count(*)" in s and "FROM customers" in s)
    assert len(sets) == 1 and sets[0] < count and seen[sets[0]] == "SET LOCAL work_mem = '64MB'"
    with rt.session(tenant.id) as s:   # transaction-local: the pooled connection is back to the default
        assert s.execute(text("SHOW work_mem")).scalar() != "64MB"


@pytest.mark.parametrize("backend", ["postgres"])   # work_mem is PostgreSQL's
def test_segment_work_mem_is_a_setting(tenant, backend, tmp_path, request, sqlite_template, clock):
    from cs_daemon.playbooks import service
    from cs_daemon.runtime import Runtime
    from tests.conftest import make_settings

    settings = make_settings(backend, tmp_path, request.getfixturevalue("pg_url"), sqlite_template,
                             cs_segment_work_mem_mb=16)
    other = Runtime(settings, clock)
    with other.session(tenant.id) as s:
        assert service.preview_count(s, UNDER_ANY, now=clock.now()) == 0
        assert s.execute(text("SHOW work_mem")).scalar() == "16MB"


def test_concurrent_changes_of_one_playbook_all_succeed(app, client, tenant):
    """Real concurrent requests to a real server: reading the playbook unlocked, most of
    them met a moved revision and answered 409, which no document lists for these."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import requests

    from tests.support.sse import AppServer

    h = auth(tenant.key)
    pid = client.post("/api/playbooks", headers=h, json={"name": "Raced"}).json["id"]
    server = AppServer(app)
    calls = [("put", "/status", {"status": "active"})] * 4 + [("put", "", {"description": "d"})] * 4 \
        + [("delete", "", None)] * 2
    start = threading.Barrier(len(calls))

    def send(call):
        method, tail, body = call
        start.wait()
        return getattr(requests, method)(f"{server.url}/api/playbooks/{pid}{tail}", headers=h, json=body, timeout=30)

    try:
        with ThreadPoolExecutor(len(calls)) as pool:
            answers = list(pool.map(send, calls))
    finally:
        server.close()
    assert [r.status_code for r in answers] == [200] * len(calls), [r.text for r in answers if r.status_code != 200]
