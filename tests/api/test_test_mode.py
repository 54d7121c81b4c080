"""Test mode is a boundary for writing (docs/api.md, "Test mode"): an rt_test_ key reads
everything, changes only test data, mints only test keys; what events tracked with it (or
a test playbook) cause is test data, delivered to the recording sink; webhook deliveries
of test-mode events say so."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from cs_daemon.decisions import requests
from cs_daemon.decisions.models import DecisionRequest
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.interventions.models import Intervention
from tests.conftest import NO_HOLDOUT, auth

REFUSAL = "a test key cannot change live data"


@pytest.fixture
def world(client, make_tenant, receiver):
    """A growth tenant with a live user, a live playbook, a live endpoint, and keys of both
    modes (an admin test key: the boundary is the mode, not the role)."""
    tenant = make_tenant("Bound", plan_tier="growth", config=dict(NO_HOLDOUT))
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u1", "event": "$identify", "properties": {"email": "u1@x.io", "name": "Ada"}}]})
    pid = client.post("/api/playbooks", headers=h, json={"name": "live"}).json["id"]
    assert client.post("/api/webhooks/endpoints", headers=h, json={"url": receiver.url}).status_code == 201
    tenant.test_key = tenant.issue("admin", ["full"], test=True)
    tenant.pid = pid
    return tenant


def _create(client, key, pid, channel="webhook"):
    resp = client.post("/api/interventions", headers=auth(key),
                       json={"user_id": "u1", "playbook_id": pid, "channel": channel, "message_body": "Hi"})
    assert resp.status_code == 201, resp.json
    return resp.json["id"]


def _refused(resp):
    assert resp.status_code == 403, resp.json
    assert resp.json == {"error": REFUSAL, "code": "forbidden"}


def _run_deliveries(rt, tenant):
    with rt.session(tenant.id) as s:
        ids = [d.id for d in s.scalars(select(Delivery).where(Delivery.status.in_(("pending", "retrying"))))]
    for delivery_id in ids:
        delivery.attempt(rt, delivery_id)


def _interventions(client, tenant, path="/api/interventions"):
    return {i["id"]: i for i in client.get(path, headers=auth(tenant.key)).json[path.rsplit("/", 1)[1]]}


def test_a_test_key_cannot_review_live_interventions_and_nothing_changes(client, world, rt):
    planned = _create(client, world.key, world.pid)
    approved = _create(client, world.key, world.pid)
    assert client.put(f"/api/interventions/{approved}/approve", headers=auth(world.key)).status_code == 200
    before = _interventions(client, world)
    with rt.session(world.id) as s:
        deliveries_before = s.scalars(select(Delivery.id)).all()
    t = auth(world.test_key)
    for iv, action, body in [(planned, "approve", None), (planned, "pause", None),
                             (planned, "reject", {"reason": "no"}), (planned, "flag", {"reason": "odd"}),
                             (approved, "pause", None), (approved, "rollback", {"reason": "oops"}),
                             (approved, "flag", {"reason": "odd"})]:
        _refused(client.put(f"/api/interventions/{iv}/{action}", headers=t, json=body or {}))
    assert _interventions(client, world) == before
    with rt.session(world.id) as s:
        assert s.scalars(select(Delivery.id)).all() == deliveries_before
    # its own test data it reviews as before
    mine = _create(client, world.test_key, world.pid)
    assert client.put(f"/api/interventions/{mine}/flag", headers=t, json={"reason": "x"}).status_code == 200
    assert client.put(f"/api/interventions/{mine}/approve", headers=t).status_code == 200


def test_a_test_key_cannot_handle_or_delegate_a_live_escalation(client, world):
    h, t = auth(world.key), auth(world.test_key)
    body = {"user_id": "u1", "playbook_id": world.pid, "severity": "High", "reason": "refund"}
    live = client.post("/api/escalations", headers=h, json=body).json["id"]
    _refused(client.put(f"/api/escalations/{live}/handle", headers=t, json={"action_taken": "called"}))
    _refused(client.put(f"/api/escalations/{live}/delegate", headers=t, json={"channel": "email"}))
    assert _interventions(client, world, "/api/escalations")[live]["status"] == "open"
    assert [i for i in _interventions(client, world).values() if i["channel"] == "email"] == []
    mine = client.post("/api/escalations", headers=t, json=body).json["id"]
    assert client.put(f"/api/escalations/{mine}/handle", headers=t, json={"action_taken": "x"}).status_code == 200


def test_a_test_key_cannot_report_the_outcome_of_a_live_action(client, world, receiver):
    h, t = auth(world.key), auth(world.test_key)
    assert client.post("/api/external/action-types", headers=h, json={
        "name": "award", "description": "points", "provider": "loyal", "parameters_schema": {},
        "delivery_webhook": receiver.url}).status_code == 201
    live = client.post("/api/external/actions", headers=h, json={"action_type": "award", "user_id": "u1"})
    mine = client.post("/api/external/actions", headers=t, json={"action_type": "award", "user_id": "u1"})
    assert mine.json["action"]["test"] is True
    outcome = {"status": "completed", "result": {"points": 5}}
    _refused(client.post(f"/api/external/actions/{live.json['action']['id']}/outcome", headers=t, json=outcome))
    assert client.post(f"/api/external/actions/{mine.json['action']['id']}/outcome", headers=t,
                       json=outcome).status_code == 200
    # nothing was recorded: the live key's own report is the first one
    assert client.post(f"/api/external/actions/{live.json['action']['id']}/outcome", headers=h,
                       json=outcome).status_code == 200


def _live_configuration(client, world, receiver):
    """Ids of live objects of every kind a path can name."""
    h = auth(world.key)
    endpoint = client.get("/api/webhooks/endpoints", headers=h).json["endpoints"][0]["id"]
    action_type = client.post("/api/external/action-types", headers=h, json={
        "name": "award", "description": "points", "provider": "loyal", "parameters_schema": {},
        "delivery_webhook": receiver.url}).json["action_type"]["id"]
    member = world.add_member("ed@bound.example", "editor")
    invitation = client.post("/api/team/invite", headers=h, json={"email": "new@bound.example",
                                                                  "role": "viewer"}).json["invitation"]["id"]
    client.post("/api/external/events/emit", headers=h, json={"type": "custom.app.ping", "user_id": "u1"})
    with world.rt.session(world.id) as s:
        delivery_id = s.scalars(select(Delivery.id).where(Delivery.kind == "event")).first()
    return {"endpoint": endpoint, "type": action_type, "member": member, "invitation": invitation,
            "delivery": delivery_id, "playbook": world.pid}


LIVE_WRITES = [
    ("PUT", "/api/playbooks/{playbook}", {"name": "renamed"}),
    ("PUT", "/api/playbooks/{playbook}/status", {"status": "active"}),
    ("DELETE", "/api/playbooks/{playbook}", None),
    ("PATCH", "/api/settings", {"name": "Renamed", "config": {"approvalMode": "full_auto"}}),
    ("PATCH", "/api/settings/brand", {"product_description": "Other"}),
    ("PUT", "/api/settings/kill-switch", {"active": True}),
    ("PUT", "/api/settings/shadow-mode", {"active": True}),
    ("POST", "/api/webhooks/endpoints", {"url": "http://127.0.0.1:9/new"}),
    ("PUT", "/api/webhooks/endpoints/{endpoint}", {"description": "mine now"}),
    ("DELETE", "/api/webhooks/endpoints/{endpoint}", None),
    ("POST", "/api/webhooks/endpoints/{endpoint}/test", None),
    ("POST", "/api/webhooks/deliveries/{delivery}/replay", None),
    ("POST", "/api/external/action-types", {"name": "other", "description": "d", "provider": "p",
                                            "parameters_schema": {}, "delivery_webhook": "http://127.0.0.1:9/x"}),
    ("PUT", "/api/external/action-types/{type}", {"description": "changed"}),
    ("DELETE", "/api/external/action-types/{type}", None),
    ("POST", "/api/external/platforms/team_chat/connect", {"credentials": {"webhook_url": "http://127.0.0.1:9/c"}}),
    ("POST", "/api/external/platforms/team_chat/disconnect", None),
    ("PUT", "/api/team/members/{member}/role", {"role": "admin"}),
    ("DELETE", "/api/team/members/{member}", None),
    ("DELETE", "/api/team/invitations/{invitation}", None),
    ("POST", "/api/billing/checkout", {"plan": "scale", "interval": "monthly"}),
]


def _readable_state(client, world) -> str:
    h = auth(world.key)
    paths = ["/api/settings", "/api/playbooks", "/api/webhooks/endpoints", "/api/external/action-types",
             "/api/external/platforms", "/api/team/members", "/api/team/invitations"]
    return json.dumps([client.get(p, headers=h).json for p in paths], sort_keys=True, default=str)


def test_a_test_key_cannot_change_live_configuration_and_nothing_changes(client, world, rt, receiver):
    ids = _live_configuration(client, world, receiver)
    with rt.session(world.id) as s:
        replayable = s.get(Delivery, ids["delivery"])
        attempts_before = replayable.attempts
    before = _readable_state(client, world)
    t = auth(world.test_key)
    for method, path, body in LIVE_WRITES:
        resp = client.open(path.format(**ids), method=method, headers=t, json=body)
        assert resp.status_code == 403 and resp.json["error"] == REFUSAL, (method, path, resp.json)
    assert _readable_state(client, world) == before
    with rt.session(world.id) as s:
        assert s.get(Delivery, ids["delivery"]).attempts == attempts_before
    # the same write is open to a live key (the refusal was the mode's, not the role's), and a
    # test key changes its own test playbook
    assert client.put(f"/api/playbooks/{world.pid}", headers=auth(world.key), json={"name": "x"}).status_code == 200
    mine = client.post("/api/playbooks", headers=t, json={"name": "trial run"}).json
    assert mine["test"] is True
    assert client.put(f"/api/playbooks/{mine['id']}", headers=t, json={"name": "renamed"}).status_code == 200
    assert client.delete(f"/api/playbooks/{mine['id']}", headers=t).status_code == 200


def test_a_test_key_mints_and_revokes_only_test_keys(client, world):
    t = auth(world.test_key)
    resp = client.post("/api/settings/api-keys", headers=t, json={"role": "admin", "permissions": ["full"],
                                                                 "test": False})
    assert resp.status_code == 403 and resp.json["code"] == "forbidden" and "live" in resp.json["error"]
    live_keys = [k for k in client.get("/api/settings", headers=t).json["api_keys"] if not k["test"]]
    assert [k["id"] for k in live_keys] == [world.key_id]
    _refused(client.delete(f"/api/settings/api-keys/{world.key_id}", headers=t))
    assert client.get("/api/settings", headers=auth(world.key)).status_code == 200    # still works
    minted = client.post("/api/settings/api-keys", headers=t, json={"role": "viewer", "test": True})
    assert minted.status_code == 201 and minted.json["api_key"].startswith("rt_test_")
    assert client.delete(f"/api/settings/api-keys/{minted.json['id']}", headers=t).json == {"revoked": True}


def test_an_invitation_made_with_a_test_key_gives_the_new_member_a_test_key(client, world):
    token = client.post("/api/team/invite", headers=auth(world.test_key),
                        json={"email": "tester@bound.example", "role": "admin"}).json["invitation"]["token"]
    accepted = client.post("/api/team/accept", json={"token": token})
    assert accepted.status_code == 200 and accepted.json["api_key"].startswith("rt_test_")
    live = client.post("/api/team/invite", headers=auth(world.key), json={"email": "real@bound.example",
                                                                          "role": "viewer"}).json["invitation"]
    assert live["test"] is False
    assert client.post("/api/team/accept", json={"token": live["token"]}).json["api_key"].startswith("rt_live_")


# -- what test-mode events cause ----------------------------------------------------------

def _active_playbook(client, key, name, channel="webhook"):
    h = auth(key)
    pid = client.post("/api/playbooks", headers=h, json={
        "name": name, "entry_conditions": {"trigger": {"event": "asked_for_help"}},
        "strategy_hints": {"preferred_channel": channel}}).json["id"]
    assert client.put(f"/api/playbooks/{pid}/status", headers=h, json={"status": "active"}).status_code == 200
    return pid


def _track(client, key, user="u1"):
    resp = client.post("/api/track", headers=auth(key), json={"events": [{"user_id": user, "event": "asked_for_help"}]})
    assert resp.status_code == 200 and resp.json["accepted"] == 1


def _decide(rt, tenant):
    with rt.session(tenant.id) as s:
        owed = s.scalars(select(DecisionRequest.id).where(DecisionRequest.done_at.is_(None))).all()
    for request_id in owed:
        requests.process(rt, request_id)


def _engine_interventions(rt, tenant):
    with rt.session(tenant.id) as s:
        return list(s.scalars(select(Intervention).where(Intervention.source == "engine")
                              .order_by(Intervention.planned_at)))


def _channel_posts(receiver):
    return [r for r in receiver.requests if r.headers.get("X-Service-Channel") == "webhook"]


def test_events_tracked_with_a_test_key_make_the_live_users_interventions_test(client, world, rt, receiver):
    client.patch("/api/settings", headers=auth(world.key), json={"approvalMode": "full_auto"})
    _active_playbook(client, world.key, "help")
    _track(client, world.test_key)          # u1 is a live user; the event is test-mode data
    _decide(rt, world)
    [iv] = _engine_interventions(rt, world)
    assert iv.test is True and iv.status == "approved"
    _run_deliveries(rt, world)
    with rt.session(world.id) as s:
        [made] = s.scalars(select(Delivery).where(Delivery.subject_id == iv.id)).all()
    assert made.url == "sink:test-mode" and made.status == "delivered"
    assert _channel_posts(receiver) == []
    item = [i for i in client.get("/api/interventions", headers=auth(world.key)).json["interventions"]
            if i["id"] == iv.id][0]
    assert item["test"] is True and item["status"] == "delivered"
    # the same event from a live key is live
    _track(client, world.key, user="u2")
    _decide(rt, world)
    assert [i.test for i in _engine_interventions(rt, world) if i.user_id == "u2"] == [False]
    _run_deliveries(rt, world)
    assert len(_channel_posts(receiver)) == 1


def test_a_test_run_on_a_live_user_uses_up_none_of_the_live_playbooks_repeat_limits(client, world, rt):
    client.patch("/api/settings", headers=auth(world.key), json={"approvalMode": "full_auto"})
    _active_playbook(client, world.key, "help")          # acts once per user (the default)
    _track(client, world.test_key)
    _decide(rt, world)
    _track(client, world.key)
    _decide(rt, world)
    assert sorted(iv.test for iv in _engine_interventions(rt, world)) == [False, True]
    _track(client, world.key)                            # the live one counts for the next live one
    _decide(rt, world)
    assert len(_engine_interventions(rt, world)) == 2


def test_a_test_playbook_decides_only_test_interventions(client, world, rt, receiver):
    client.patch("/api/settings", headers=auth(world.key), json={"approvalMode": "full_auto"})
    _active_playbook(client, world.test_key, "trial")
    _track(client, world.key)               # a live event, a live user: the playbook is test data
    _decide(rt, world)
    [iv] = _engine_interventions(rt, world)
    assert iv.test is True
    _run_deliveries(rt, world)
    assert _channel_posts(receiver) == []


def test_a_test_event_is_no_response_to_a_live_intervention(client, world, rt):
    iv = _create(client, world.key, world.pid)
    assert client.put(f"/api/interventions/{iv}/approve", headers=auth(world.key)).status_code == 200
    _run_deliveries(rt, world)

    def responded_at():
        with rt.session(world.id) as s:
            return s.get(Intervention, iv).responded_at

    assert responded_at() is None
    _track(client, world.test_key)
    assert responded_at() is None
    _track(client, world.key)
    assert responded_at() is not None


def test_webhook_deliveries_of_test_mode_events_say_so(client, world, rt, receiver):
    for key in (world.key, world.test_key):
        resp = client.post("/api/external/events/emit", headers=auth(key),
                           json={"type": "custom.app.ping", "user_id": "u1", "data": {"n": 1}})
        assert resp.status_code == 200
    _run_deliveries(rt, world)
    live, test = [r for r in receiver.requests if json.loads(r.body)["event"] == "custom.app.ping"]
    assert "test" not in json.loads(live.body) and "X-Service-Test" not in live.headers
    assert json.loads(test.body)["test"] is True and test.headers["X-Service-Test"] == "1"
    assert json.loads(test.body)["data"] == {"n": 1}


def test_the_openapi_document_says_what_a_test_key_may_write(client):
    paths = client.get("/api/openapi.json").json["paths"]
    assert paths["/api/interventions/{intervention_id}/approve"]["put"]["x-access"]["test_keys"] == "test data only"
    assert paths["/api/settings"]["patch"]["x-access"]["test_keys"] == "refused: live configuration"
    assert paths["/api/webhooks/endpoints/{endpoint_id}"]["put"]["x-access"]["test_keys"] == \
        "refused: live configuration"
    assert paths["/api/track"]["post"]["x-access"]["test_keys"].startswith("allowed")
    assert "test_keys" not in paths["/api/interventions"]["get"]["x-access"]
