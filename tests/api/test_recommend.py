"""POST /api/decisions/recommend: the choice follows observed outcomes (docs/decisions.md, "Recommend")."""

from __future__ import annotations

from sqlalchemy import select

from cs_daemon.external.models import ExternalAction
from cs_daemon.outbox.models import OutboxEvent
from tests.conftest import auth


def _user(client, tenant, user="u1"):
    client.post("/api/track", headers=auth(tenant.key), json={"events": [{"user_id": user, "event": "x"}]})


def _outcomes(rt, tenant, action, stage, statuses):
    with rt.session(tenant.id) as s:
        for status in statuses:
            s.add(ExternalAction(action_type=action, user_id="someone", status="completed", lifecycle_stage=stage,
                                 outcome_status=status, created_at=rt.now()))


def _recommend(client, key, actions, user="u1"):
    resp = client.post("/api/decisions/recommend", headers=auth(key),
                       json={"user_id": user, "domain": "loyalty", "available_actions": actions})
    assert resp.status_code == 200, resp.json
    return resp.json


def test_without_outcomes_the_callers_order_breaks_the_tie(client, tenant):
    _user(client, tenant)
    body = _recommend(client, tenant.key, ["award_points", "send_coupon"])
    assert body["recommendation"]["action"] == "award_points"
    assert body["recommendation"]["confidence"] == 0.5
    assert [a["action"] for a in body["alternatives"]] == ["send_coupon"]
    assert body["user_id"] == "u1" and body["domain"] == "loyalty"
    assert set(body["user_context"]) == {"lifecycle_stage", "activation_score", "engagement_score", "risk_level"}


def test_observed_outcomes_change_the_choice(client, tenant, rt):
    _user(client, tenant)
    stage = client.get("/api/customers/u1", headers=auth(tenant.key)).json["customer"]["lifecycle_stage"]
    _outcomes(rt, tenant, "award_points", stage, ["rejected", "ignored", "rejected"])
    _outcomes(rt, tenant, "send_coupon", stage, ["completed", "completed", "partial", "rejected"])
    body = _recommend(client, tenant.key, ["award_points", "send_coupon"])
    assert body["recommendation"]["action"] == "send_coupon"
    assert body["recommendation"]["confidence"] > body["alternatives"][0]["confidence"]
    assert "3 of 4" in body["recommendation"]["reasoning"]
    with rt.session(tenant.id) as s:
        [event] = s.scalars(select(OutboxEvent).where(OutboxEvent.event_type == "decision.recommended")).all()
    assert event.payload["action"] == "send_coupon"


def test_outcomes_of_other_tenants_do_not_count(client, tenant, make_tenant, rt):
    other = make_tenant("Other")
    _user(client, tenant)
    _outcomes(rt, other, "send_coupon", "activated", ["completed"] * 5)
    assert _recommend(client, tenant.key, ["award_points", "send_coupon"])["recommendation"]["action"] == "award_points"


def test_needs_decide_and_a_known_user(client, tenant):
    _user(client, tenant)
    reader = tenant.issue("editor", ["read"])
    decider = tenant.issue("editor", ["decide"])
    body = {"user_id": "u1", "available_actions": ["a"]}
    assert client.post("/api/decisions/recommend", headers=auth(reader), json=body).status_code == 403
    assert client.post("/api/decisions/recommend", headers=auth(decider), json=body).status_code == 200
    assert client.post("/api/decisions/recommend", headers=auth(decider),
                       json={"user_id": "ghost", "available_actions": ["a"]}).status_code == 404
    assert client.post("/api/decisions/recommend", headers=auth(decider),
                       json={"user_id": "u1", "available_actions": []}).status_code == 400
