"""External Actions API (spec "External actions", decisions §10), against a real receiver."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from datetime import timedelta

import pytest
from sqlalchemy import select

from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.external import service as external
from cs_daemon.outbox.models import OutboxEvent
from tests.conftest import auth
from tests.support.receiver import Receiver

SCHEMA = {"type": "object", "properties": {"points": {"type": "integer", "minimum": 1}},
          "required": ["points"], "additionalProperties": False}


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


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
