"""External Actions API (docs/external-actions.md), against a real receiver."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from datetime import timedelta

import pytest
from sqlalchemy import select

from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.external import service as external
from cs_daemon.outbox.models import OutboxEvent
from tests.conftest import auth

SCHEMA = {"type": "object", "properties": {"points": {"type": "integer", "minimum": 1}},
          "required": ["points"], "additionalProperties": False}


@pytest.fixture
def partner(client, tenant, receiver):
    key = tenant.issue("editor", ["manage"])
    resp = client.post("/api/external/action-types", headers=auth(key), json={
        "name": "award_points", "description": "Give loyalty points", "provider": "loyaltyco",
        "parameters_schema": SCHEMA, "delivery_webhook": receiver.url, "domain": "loyalty",
        "estimated_cost_usd": "0.02"})
    assert resp.status_code == 201, resp.json
    client.post("/api/track", headers=auth(tenant.key), json={"events": [{"user_id": "u1", "event": "x"}]})
    return key, resp.json["action_type"]


def _run(rt, tenant):
    with rt.session(tenant.id) as s:
        ids = [d.id for d in s.scalars(select(Delivery).where(Delivery.status.in_(("pending", "retrying"))))]
    for delivery_id in ids:
        delivery.attempt(rt, delivery_id)


def _kinds(rt, tenant):
    with rt.session(tenant.id) as s:
        return [o.event_type for o in s.scalars(select(OutboxEvent).order_by(OutboxEvent.created_at))]


def test_action_type_lifecycle(client, tenant, partner):
    key, created = partner
    assert set(created) == {"id", "name", "webhook_secret"} and re.fullmatch(r"[0-9a-f]{64}", created["webhook_secret"])
    h = auth(key)
    listed = client.get("/api/external/action-types?provider=loyaltyco&active=true", headers=auth(tenant.key)).json
    [item] = listed["action_types"]
    assert item["name"] == "award_points" and "webhook_secret" not in item and created["webhook_secret"] not in json.dumps(listed)
    assert client.get("/api/external/action-types?domain=other", headers=auth(tenant.key)).json["action_types"] == []
    resp = client.put(f"/api/external/action-types/{created['id']}", headers=h, json={"description": "Points!"})
    assert resp.status_code == 200 and resp.json["action_type"]["description"] == "Points!"
    assert client.delete(f"/api/external/action-types/{created['id']}", headers=h).json == {"deactivated": True}
    assert client.get("/api/external/action-types?active=false", headers=auth(tenant.key)).json["action_types"][0][
        "active"] is False


@pytest.mark.parametrize("change, field", [
    ({"name": "AwardPoints"}, "name"), ({"parameters_schema": {"type": "nonsense"}}, "parameters_schema"),
    ({"delivery_webhook": "ftp://x"}, "delivery_webhook"), ({"description": ""}, "description"),
])
def test_bad_action_types_are_refused(client, tenant, receiver, change, field):
    body = {"name": "a_b", "description": "d", "provider": "p", "parameters_schema": {}, "delivery_webhook": receiver.url,
            **change}
    resp = client.post("/api/external/action-types", headers=auth(tenant.key), json=body)
    assert resp.status_code == 400 and field in resp.json["details"][0]["field"]


def test_permissions(client, tenant, receiver):
    reader = tenant.issue("editor", ["read"])
    body = {"name": "a", "description": "d", "provider": "p", "parameters_schema": {}, "delivery_webhook": receiver.url}
    assert client.post("/api/external/action-types", headers=auth(reader), json=body).status_code == 403
    assert client.get("/api/external/actions", headers=auth(tenant.issue("editor", ["manage"]))).status_code == 403
    assert client.get("/api/external/actions", headers=auth(reader)).status_code == 200


def test_dispatch_is_signed_and_moves_through_the_states(client, tenant, rt, partner, receiver):
    key, created = partner
    resp = client.post("/api/external/actions", headers=auth(key),
                       json={"action_type": "award_points", "user_id": "u1", "parameters": {"points": 50}})
    assert resp.status_code == 201
    action = resp.json["action"]
    assert action["status"] == "pending" and action["action_type"] == "award_points"
    _run(rt, tenant)
    [req] = receiver.requests
    body = json.loads(req.body)
    assert set(body) == {"action_id", "action_type", "user_id", "parameters", "reasoning", "confidence",
                         "tenant_id", "timestamp"}
    assert body["action_id"] == action["id"] and body["parameters"] == {"points": 50}
    assert isinstance(body["confidence"], str) and body["tenant_id"] == tenant.id
    assert req.headers["X-Service-Action-Id"] == action["id"]
    assert req.headers["X-Service-Signature"] == hmac.new(created["webhook_secret"].encode(), req.body,
                                                          hashlib.sha256).hexdigest()
    assert req.headers["X-Service-Timestamp"]
    listed = client.get("/api/external/actions?status=delivered", headers=auth(tenant.key)).json["actions"]
    assert [a["id"] for a in listed] == [action["id"]] and listed[0]["attempts"] == 1 and listed[0]["dispatched_at"]
    resp = client.post(f"/api/external/actions/{action['id']}/outcome", headers=auth(key),
                       json={"status": "partial", "result": {"awarded": 25}})
    assert resp.json == {"recorded": True, "action_id": action["id"], "outcome_status": "partial"}
    again = client.post(f"/api/external/actions/{action['id']}/outcome", headers=auth(key), json={"status": "completed"})
    assert again.status_code == 409
    final = client.get("/api/external/actions", headers=auth(tenant.key)).json["actions"][0]
    assert final["status"] == "completed" and final["outcome_result"] == {"awarded": 25}
    assert _kinds(rt, tenant)[-2:] == ["external_action.dispatched", "external_action.completed"]


def test_an_action_made_by_hand_is_dispatched_with_confidence_1_0(client, tenant, rt, partner, receiver):
    key, _ = partner
    resp = client.post("/api/external/actions", headers=auth(key),
                       json={"action_type": "award_points", "user_id": "u1", "parameters": {"points": 5}})
    assert resp.status_code == 201
    _run(rt, tenant)
    [req] = receiver.requests
    assert json.loads(req.body)["confidence"] == "1.0"   # a string holding a number, never ""


def test_rejected_outcomes_and_failed_dispatch(client, tenant, rt, clock, partner, receiver):
    key, _ = partner
    a = client.post("/api/external/actions", headers=auth(key),
                    json={"action_type": "award_points", "user_id": "u1", "parameters": {"points": 1}}).json["action"]
    _run(rt, tenant)
    client.post(f"/api/external/actions/{a['id']}/outcome", headers=auth(key), json={"status": "rejected"})
    assert client.get("/api/external/actions", headers=auth(tenant.key)).json["actions"][0]["status"] == "failed"
    receiver.script = [500]
    b = client.post("/api/external/actions", headers=auth(key),
                    json={"action_type": "award_points", "user_id": "u1", "parameters": {"points": 1}}).json["action"]
    for d in [timedelta(0)] + list(delivery.RETRY_DELAYS):
        clock.advance(seconds=d.total_seconds())
        _run(rt, tenant)
    item = [x for x in client.get("/api/external/actions", headers=auth(tenant.key)).json["actions"] if x["id"] == b["id"]][0]
    assert item["status"] == "failed" and item["attempts"] == 6
    assert "external_action.failed" in _kinds(rt, tenant)


def test_an_outcome_settles_a_dispatch_still_retrying_but_not_a_failed_or_expired_action(
        client, tenant, rt, clock, partner, receiver):
    key, _ = partner
    h = auth(tenant.key)

    def made():
        return client.post("/api/external/actions", headers=auth(key), json={
            "action_type": "award_points", "user_id": "u1", "parameters": {"points": 1}}).json["action"]["id"]

    def item(action_id):
        return [a for a in client.get("/api/external/actions", headers=h).json["actions"] if a["id"] == action_id][0]

    receiver.script = [500] * 7 + [200]
    retrying = made()
    _run(rt, tenant)
    resp = client.post(f"/api/external/actions/{retrying}/outcome", headers=auth(key), json={"status": "completed"})
    assert resp.status_code == 200
    for d in delivery.RETRY_DELAYS:      # the dispatch's retries were let go: none is sent
        clock.advance(seconds=d.total_seconds())
        _run(rt, tenant)
    assert len(receiver.requests) == 1
    assert item(retrying)["status"] == "completed" and item(retrying)["attempts"] == 1
    failed = made()
    for d in [timedelta(0)] + list(delivery.RETRY_DELAYS):
        clock.advance(seconds=d.total_seconds())
        _run(rt, tenant)
    assert item(failed)["status"] == "failed"
    expired = made()
    _run(rt, tenant)
    clock.advance(days=7)
    with rt.session() as s:
        assert external.expire(s, now=clock.now()) == 1
    for action_id, status in ((failed, "failed"), (expired, "expired")):
        resp = client.post(f"/api/external/actions/{action_id}/outcome", headers=auth(key), json={"status": "completed"})
        assert resp.status_code == 409 and resp.json["code"] == "invalid_state"
        assert item(action_id)["status"] == status and item(action_id)["outcome_status"] is None
    kinds = _kinds(rt, tenant)
    assert kinds.count("external_action.completed") == 1 and kinds.count("external_action.failed") == 1


def test_no_outcome_in_7_days_expires(client, tenant, rt, clock, partner):
    key, _ = partner
    client.post("/api/external/actions", headers=auth(key),
                json={"action_type": "award_points", "user_id": "u1", "parameters": {"points": 1}})
    _run(rt, tenant)
    clock.advance(days=7)
    with rt.session() as s:
        assert external.expire(s, now=clock.now()) == 1
    assert client.get("/api/external/actions", headers=auth(tenant.key)).json["actions"][0]["status"] == "expired"


def test_parameters_are_validated_against_the_schema(client, tenant, partner):
    key, _ = partner
    for params in ({}, {"points": 0}, {"points": 1, "extra": True}):
        resp = client.post("/api/external/actions", headers=auth(key),
                           json={"action_type": "award_points", "user_id": "u1", "parameters": params})
        assert resp.status_code == 400 and resp.json["details"]
    assert client.post("/api/external/actions", headers=auth(key),
                       json={"action_type": "nope", "user_id": "u1"}).status_code == 404
    assert client.get("/api/external/actions", headers=auth(tenant.key)).json["actions"] == []


EVIL = "^(a+)+$"                      # Python's engine backtracks through 2^n ways to refuse "a"*n + "!"
SLOW = "a" * 25 + "!"                  # seconds with `re`; RE2 answers in microseconds


def _action_type(client, key, receiver, name, schema):
    return client.post("/api/external/action-types", headers=auth(key), json={
        "name": name, "description": "d", "provider": "p", "parameters_schema": schema,
        "delivery_webhook": receiver.url})


@pytest.mark.parametrize("schema, slow, fine", [
    ({"type": "object", "properties": {"code": {"type": "string", "pattern": EVIL}}}, {"code": SLOW}, {"code": "aa"}),
    ({"type": "object", "propertyNames": {"pattern": EVIL}}, {SLOW: 1}, {"aa": 1}),
    ({"type": "object", "patternProperties": {EVIL: {"type": "string"}}, "additionalProperties": False},
     {SLOW: 1}, {"aa": "x"}),
], ids=["pattern", "propertyNames", "patternProperties"])
def test_a_backtracking_pattern_answers_within_the_time_bound(client, tenant, receiver, schema, slow, fine):
    key = tenant.issue("editor", ["manage"])
    assert _action_type(client, key, receiver, "evil", schema).status_code == 201
    client.post("/api/track", headers=auth(tenant.key), json={"events": [{"user_id": "u1", "event": "x"}]})
    started = time.monotonic()
    resp = client.post("/api/external/actions", headers=auth(key),
                       json={"action_type": "evil", "user_id": "u1", "parameters": slow})
    assert time.monotonic() - started < 0.5
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed" and resp.json["details"]
    assert client.get("/api/external/actions", headers=auth(tenant.key)).json["actions"] == []
    resp = client.post("/api/external/actions", headers=auth(key),
                       json={"action_type": "evil", "user_id": "u1", "parameters": fine})
    assert resp.status_code == 201, resp.json


@pytest.mark.parametrize("schema", [
    {"properties": {"code": {"type": "string", "pattern": "^(a)\\1$"}}},             # a backreference
    {"properties": {"code": {"type": "string", "pattern": "^(?=a)a$"}}},             # look-ahead
    {"patternProperties": {"(?<=x)y": {}}},                                          # look-behind
    {"patternProperties": {"^a": {}}, "unevaluatedProperties": False},
], ids=["backreference", "look-ahead", "look-behind", "unevaluatedProperties"])
def test_a_pattern_that_cannot_run_in_linear_time_is_refused_at_registration(client, tenant, receiver, schema):
    key = tenant.issue("editor", ["manage"])
    resp = _action_type(client, key, receiver, "refused", {"type": "object", **schema})
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed", resp.json
    assert resp.json["details"][0]["field"] == "parameters_schema"
    assert client.get("/api/external/action-types", headers=auth(tenant.key)).json["action_types"] == []


def test_action_list_filters_and_limits(client, tenant, partner):
    h = auth(tenant.key)
    for q in ("limit=0", "limit=101", "since=yesterday", "status=done"):
        assert client.get(f"/api/external/actions?{q}", headers=h).status_code == 400
    assert client.get("/api/external/actions?limit=100&user_id=u1&provider=loyaltyco&since=2020-01-01T00:00:00Z",
                      headers=h).status_code == 200


def test_custom_events_are_validated_broadcast_and_ingested(client, growth_tenant, rt, receiver):
    tenant = growth_tenant
    h = auth(tenant.key)
    endpoint = client.post("/api/webhooks/endpoints", headers=h,
                           json={"url": receiver.url, "events": ["custom.loyalty.points_awarded"]})
    assert endpoint.status_code == 201
    resp = client.post("/api/external/events", headers=h, json={"events": [
        {"type": "custom.loyalty.points_awarded", "user_id": "u1", "data": {"points": 5}},
        {"type": "Custom.Bad", "user_id": "u1"},
        {"type": "custom.loyalty.tier_up"},
    ]})
    assert resp.status_code == 200
    assert resp.json["accepted"] == 1 and resp.json["rejected"] == 2
    assert {(e["index"], e["field"]) for e in resp.json["errors"]} == {(1, "type"), (2, "user_id")}
    events = client.get("/api/customers/u1", headers=h).json["events"]
    assert [(e["event"], e["source"]) for e in events] == [("custom.loyalty.points_awarded", "external")]
    _run(rt, tenant)
    assert [json.loads(r.body)["event"] for r in receiver.requests] == ["custom.loyalty.points_awarded"]
    assert client.post("/api/external/events/emit", headers=h,
                       json={"type": "custom.loyalty.tier_up", "user_id": "u1"}).json == {"accepted": 1}
    assert client.post("/api/external/events/emit", headers=h, json={"type": "nope", "user_id": "u1"}).status_code == 400
    assert client.post("/api/external/events", headers=h, json={"events": [{}] * 101}).status_code == 400


def test_an_empty_batch_of_custom_events_is_refused(client, tenant, rt):
    resp = client.post("/api/external/events", headers=auth(tenant.key), json={"events": []})
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed"
    assert [d["field"] for d in resp.json["details"]] == ["events"]
    assert _kinds(rt, tenant) == []


@pytest.fixture
def growth_tenant(make_tenant):
    return make_tenant("Grow", plan_tier="growth")


def test_the_engine_dispatches_an_external_action_it_picks(client, tenant, rt, partner, receiver):
    from cs_daemon.decisions import requests as owed
    from cs_daemon.decisions.models import DecisionRequest

    h = auth(tenant.key)
    pid = client.post("/api/playbooks", headers=h, json={
        "name": "reward", "entry_conditions": {"trigger": {"event": "made_purchase"}},
        "strategy_hints": {"action_type": "award_points", "action_parameters": {"points": 10}}}).json["id"]
    client.put(f"/api/playbooks/{pid}/status", headers=h, json={"status": "active"})
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "made_purchase"}]})
    with rt.session(tenant.id) as s:
        ids = [r.id for r in s.scalars(select(DecisionRequest))]
    for request_id in ids:
        owed.process(rt, request_id)
    _run(rt, tenant)
    [req] = receiver.requests
    body = json.loads(req.body)
    assert body["action_type"] == "award_points" and body["parameters"] == {"points": 10}
    assert float(body["confidence"]) > 0 and body["reasoning"]


def test_a_receiver_failing_then_succeeding_follows_the_retry_schedule(client, tenant, rt, clock, partner, receiver):
    from cs_daemon.delivery.models import DeliveryAttempt

    key, _ = partner
    receiver.script = [500, 503, 200]
    start = clock.now()
    action = client.post("/api/external/actions", headers=auth(key), json={
        "action_type": "award_points", "user_id": "u1", "parameters": {"points": 3}}).json["action"]
    _run(rt, tenant)                                       # +0: 500
    clock.advance(seconds=29)
    _run(rt, tenant)                                       # not yet due
    assert len(receiver.requests) == 1
    clock.advance(seconds=1)
    _run(rt, tenant)                                       # +30 s: 503
    clock.advance(seconds=119)
    _run(rt, tenant)
    assert len(receiver.requests) == 2
    clock.advance(seconds=1)
    _run(rt, tenant)                                       # +2 min after that: 200
    clock.advance(hours=3)
    _run(rt, tenant)                                       # nothing more
    assert len(receiver.requests) == 3
    assert {r.headers["X-Service-Action-Id"] for r in receiver.requests} == {action["id"]}
    with rt.session(tenant.id) as s:
        attempts = s.scalars(select(DeliveryAttempt).order_by(DeliveryAttempt.number)).all()
        assert [(a.number, a.at - start, a.status_code) for a in attempts] == [
            (1, timedelta(0), 500), (2, timedelta(seconds=30), 503), (3, timedelta(seconds=150), 200)]
    listed = client.get("/api/external/actions", headers=auth(tenant.key)).json["actions"][0]
    assert listed["status"] == "delivered" and listed["attempts"] == 3


# Each row of the spec's permission table (Authentication, point 4), both ways: a key with
# the row's permission (and with full) passes, keys with every other permission are 403.
ROWS = {
    "action type create": (["manage"], lambda c, h, ctx: c.post("/api/external/action-types", headers=h, json={
        "name": f"t_{ctx['n']}", "description": "d", "provider": "p", "parameters_schema": {},
        "delivery_webhook": ctx["url"]})),
    "action type update": (["manage"], lambda c, h, ctx: c.put(f"/api/external/action-types/{ctx['type_id']}",
                                                               headers=h, json={"description": "better"})),
    "action type deactivate": (["manage"], lambda c, h, ctx: c.delete(f"/api/external/action-types/{ctx['spare_id']}",
                                                                      headers=h)),
    "report outcome": (["manage"], lambda c, h, ctx: c.post(f"/api/external/actions/{ctx['action_id']}/outcome",
                                                            headers=h, json={"status": "completed"})),
    "push events": (["ingest"], lambda c, h, ctx: c.post("/api/external/events", headers=h, json={"events": [
        {"type": "custom.loyalty.tier_up", "user_id": "u1"}]})),
    "emit event": (["ingest"], lambda c, h, ctx: c.post("/api/external/events/emit", headers=h, json={
        "type": "custom.loyalty.tier_up", "user_id": "u1"})),
    "get recommendation": (["decide"], lambda c, h, ctx: c.post("/api/decisions/recommend", headers=h, json={
        "user_id": "u1", "available_actions": ["award_points"]})),
    "list actions": (["read"], lambda c, h, ctx: c.get("/api/external/actions", headers=h)),
}
PERMISSIONS = ("read", "manage", "ingest", "decide", "full")


@pytest.mark.parametrize("row", sorted(ROWS))
def test_each_permission_row_is_enforced_both_ways(client, tenant, rt, partner, receiver, row):
    key, created = partner
    spare = client.post("/api/external/action-types", headers=auth(key), json={
        "name": "spare", "description": "d", "provider": "p", "parameters_schema": {},
        "delivery_webhook": receiver.url}).json["action_type"]
    ctx = {"url": receiver.url, "type_id": created["id"], "spare_id": spare["id"], "n": 0}
    allowed, call = ROWS[row]
    for permission in PERMISSIONS:
        ctx["n"] += 1
        if row == "report outcome":       # a fresh action each time: an outcome is reported once
            ctx["action_id"] = client.post("/api/external/actions", headers=auth(key), json={
                "action_type": "award_points", "user_id": "u1", "parameters": {"points": 1}}).json["action"]["id"]
            _run(rt, tenant)
        if row == "action type deactivate":
            client.put(f"/api/external/action-types/{spare['id']}", headers=auth(key), json={"active": True})
        resp = call(client, auth(tenant.issue("editor", [permission])), ctx)
        if permission in allowed or permission == "full":
            assert resp.status_code < 300, (row, permission, resp.status_code, resp.json)
        else:
            assert resp.status_code == 403 and resp.json["code"] == "forbidden", (row, permission, resp.status_code)


def test_platform_connect_and_disconnect_need_the_admin_role_both_ways(client, tenant):
    body = {"credentials": {"webhook_url": "http://127.0.0.1:9/chat"}}
    for role in ("editor", "viewer"):
        h = auth(tenant.issue(role, ["full"]))
        for path in ("connect", "disconnect"):
            resp = client.post(f"/api/external/platforms/team_chat/{path}", headers=h, json=body)
            assert resp.status_code == 403 and resp.json["code"] == "forbidden", (role, path)
    admin = auth(tenant.issue("admin", ["full"]))
    assert client.post("/api/external/platforms/team_chat/connect", headers=admin, json=body).status_code == 200
    assert client.post("/api/external/platforms/team_chat/disconnect", headers=admin).status_code == 200


def test_a_bad_custom_event_type_is_refused_while_its_neighbours_are_accepted(client, tenant):
    h = auth(tenant.key)
    resp = client.post("/api/external/events", headers=h, json={"events": [
        {"type": "custom.loyalty.points_awarded", "user_id": "u1", "data": {"points": 5}},
        {"type": "Custom.Bad", "user_id": "u1"},
        {"type": "custom.support.ticket_closed", "user_id": "u1"},
    ]})
    assert resp.status_code == 200
    assert resp.json == {"accepted": 2, "rejected": 1,
                         "errors": [{"index": 1, "field": "type", "message": resp.json["errors"][0]["message"]}]}
    events = client.get("/api/customers/u1", headers=h).json["events"]
    assert sorted(e["event"] for e in events if e["source"] == "external") == [
        "custom.loyalty.points_awarded", "custom.support.ticket_closed"]


def test_a_custom_events_offset_postgresql_cannot_read_is_stored_in_utc(client, tenant, rt):
    from datetime import datetime, timezone

    from cs_daemon.customers.models import Event

    h = auth(tenant.key)
    resp = client.post("/api/external/events", headers=h, json={"events": [
        {"type": "custom.loyalty.points_awarded", "user_id": "u1", "timestamp": "2026-06-13T11:16:11-17:23"},
        {"type": "custom.loyalty.points_awarded", "user_id": "u1", "timestamp": "9999-12-31T23:59:59-17:00"},
    ]})
    assert resp.status_code == 200, resp.json
    assert resp.json["accepted"] == 1 and [e["field"] for e in resp.json["errors"]] == ["timestamp"]
    with rt.session(tenant.id) as s:
        [stored] = s.scalars(select(Event.timestamp)).all()
    at = stored if stored.tzinfo else stored.replace(tzinfo=timezone.utc)
    assert at == datetime.fromisoformat("2026-06-13T11:16:11-17:23")
