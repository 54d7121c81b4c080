"""POST /api/decisions/recommend: the choice learns from observed outcomes, per kind of
user, and every recommendation is logged (docs/decisions.md, "Learning")."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import select

from cs_daemon.learning import service as learning
from cs_daemon.learning.models import DecisionCount, DecisionLog
from cs_daemon.outbox.models import OutboxEvent
from tests.conftest import auth


@pytest.fixture(autouse=True)
def seeded():
    learning.RANDOM.seed(20261126)


def _user(client, tenant, user="u1", traits=None):
    event = {"user_id": user, "event": "$identify", "properties": traits} if traits else {"user_id": user, "event": "x"}
    client.post("/api/track", headers=auth(tenant.key), json={"events": [event]})


@pytest.fixture
def types(client, tenant, receiver):
    """Action types the partner registered, and its key."""
    key = tenant.issue("editor", ["manage", "decide", "read"])
    for name in ("award_points", "send_coupon", "feature_tour"):
        resp = client.post("/api/external/action-types", headers=auth(key), json={
            "name": name, "description": "d", "provider": "p", "parameters_schema": {},
            "delivery_webhook": receiver.url})
        assert resp.status_code == 201, resp.json
    return key


def _recommend(client, key, actions, user="u1", context=None):
    resp = client.post("/api/decisions/recommend", headers=auth(key),
                       json={"user_id": user, "domain": "loyalty", "available_actions": actions,
                             "context": context or {}})
    assert resp.status_code == 200, resp.json
    return resp.json


def _act(client, key, action, status, user="u1", decision_id=None):
    """Dispatch the action for the user and report its outcome."""
    body = {"action_type": action, "user_id": user, **({"decision_id": decision_id} if decision_id else {})}
    resp = client.post("/api/external/actions", headers=auth(key), json=body)
    assert resp.status_code == 201, resp.json
    action_id = resp.json["action"]["id"]
    resp = client.post(f"/api/external/actions/{action_id}/outcome", headers=auth(key), json={"status": status})
    assert resp.status_code == 200, resp.json
    return action_id


def test_without_outcomes_every_action_is_at_even_odds(client, tenant):
    _user(client, tenant)
    body = _recommend(client, tenant.key, ["award_points", "send_coupon"])
    assert body["recommendation"]["action"] in ("award_points", "send_coupon")
    assert body["recommendation"]["confidence"] == 0.5 == body["alternatives"][0]["confidence"]
    assert 0.3 < body["propensity"] < 0.7
    assert body["user_id"] == "u1" and body["domain"] == "loyalty" and body["decision_id"]
    assert set(body["user_context"]) == {"lifecycle_stage", "activation_score", "engagement_score", "risk_level"}
    assert "no outcomes reported yet" in body["recommendation"]["reasoning"]


def test_reported_outcomes_change_the_choice_and_the_reasoning(client, tenant, types, rt):
    _user(client, tenant)
    for status in ["rejected", "ignored", "rejected", "ignored", "rejected"]:
        _act(client, types, "award_points", status)
    for status in ["completed", "completed", "partial", "completed", "rejected"]:
        _act(client, types, "send_coupon", status)
    picks = [_recommend(client, types, ["award_points", "send_coupon"]) for _ in range(10)]
    assert sum(p["recommendation"]["action"] == "send_coupon" for p in picks) >= 8
    coupon = next(p for p in picks if p["recommendation"]["action"] == "send_coupon")
    assert coupon["recommendation"]["confidence"] > coupon["alternatives"][0]["confidence"]
    assert "4 of 5 overall" in coupon["recommendation"]["reasoning"]
    with rt.session(tenant.id) as s:
        events = s.scalars(select(OutboxEvent).where(OutboxEvent.event_type == "decision.recommended")).all()
    assert {e.payload["decision_id"] for e in events} == {p["decision_id"] for p in picks}


def test_a_recommendation_is_logged_and_its_action_joins_it(client, tenant, types, rt):
    _user(client, tenant)
    body = _recommend(client, types, ["award_points", "send_coupon"], context={"plan": "smb", "nested": {"x": 1}})
    action_id = _act(client, types, body["recommendation"]["action"], "completed")
    with rt.session(tenant.id) as s:
        row = s.get(DecisionLog, body["decision_id"])
        tallies = s.scalars(select(DecisionCount)).all()
    assert row.choice == body["recommendation"]["action"] and row.external_action_id == action_id
    assert row.features["plan"] == "smb" and "nested" not in row.features
    assert row.propensity == pytest.approx(body["propensity"], abs=1e-3) and row.success is True
    assert row.decided_by == "learner" and {o["option"] for o in row.options} == {"award_points", "send_coupon"}
    counted = {t.key: (t.successes, t.trials) for t in tallies if t.option == row.choice}
    assert counted["*"] == (1, 1) and counted["plan=smb"] == (1, 1)     # once, under every key


def test_an_action_names_its_decision_exactly(client, tenant, types):
    _user(client, tenant)
    first = _recommend(client, types, ["award_points"])
    _recommend(client, types, ["award_points"])
    resp = client.post("/api/external/actions", headers=auth(types),
                       json={"action_type": "award_points", "user_id": "u1", "decision_id": first["decision_id"]})
    assert resp.status_code == 201
    again = client.post("/api/external/actions", headers=auth(types),
                        json={"action_type": "award_points", "user_id": "u1", "decision_id": first["decision_id"]})
    assert again.status_code == 404
    assert len(client.get("/api/external/actions", headers=auth(types)).json["actions"]) == 1


def test_an_action_of_another_type_than_its_decision_chose_is_refused(client, tenant, types, rt):
    """Its outcome would have taught the action recommended, not the one taken."""
    _user(client, tenant)
    rec = _recommend(client, types, ["award_points", "send_coupon"])
    other = ({"award_points", "send_coupon"} - {rec["recommendation"]["action"]}).pop()
    resp = client.post("/api/external/actions", headers=auth(types),
                       json={"action_type": other, "user_id": "u1", "decision_id": rec["decision_id"]})
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "decision_id", resp.json
    assert client.get("/api/external/actions", headers=auth(types)).json["actions"] == []
    with rt.session(tenant.id) as s:
        assert s.get(DecisionLog, rec["decision_id"]).external_action_id is None
    _act(client, types, rec["recommendation"]["action"], "completed", decision_id=rec["decision_id"])


def test_test_mode_outcomes_do_not_move_live_estimates(client, tenant, types, rt):
    _user(client, tenant)
    test_key = tenant.issue("editor", ["manage", "decide"], test=True)
    _user(client, tenant, "t1")
    for _ in range(5):
        body = _recommend(client, test_key, ["award_points", "send_coupon"], user="u1")
        _act(client, test_key, "send_coupon", "completed", decision_id=None)
    live = _recommend(client, types, ["award_points", "send_coupon"])
    assert {a["confidence"] for a in [live["recommendation"], *live["alternatives"]]} == {0.5}
    with rt.session(tenant.id) as s:
        assert s.scalars(select(DecisionCount)).all() == []
        assert all(r.test for r in s.scalars(select(DecisionLog).where(DecisionLog.id != live["decision_id"])))
    assert body["decision_id"]


def test_outcomes_of_other_tenants_do_not_count(client, tenant, make_tenant, receiver):
    other = make_tenant("Other")
    client.post("/api/external/action-types", headers=auth(other.key), json={
        "name": "send_coupon", "description": "d", "provider": "p", "parameters_schema": {},
        "delivery_webhook": receiver.url})
    _user(client, other)
    for _ in range(5):
        _act(client, other.key, "send_coupon", "completed")
    _user(client, tenant)
    body = _recommend(client, tenant.key, ["award_points", "send_coupon"])
    assert {a["confidence"] for a in [body["recommendation"], *body["alternatives"]]} == {0.5}


def test_converges_on_the_best_action_per_kind_of_user(client, tenant, types):
    """A simulated population whose two kinds of users answer different actions (the
    unit tests run a longer one whose kinds are a combination of two features)."""
    world = random.Random(4)
    rates = {("smb", "eu"): {"feature_tour": 0.8, "send_coupon": 0.1},
             ("ent", "us"): {"feature_tour": 0.1, "send_coupon": 0.8}}
    _user(client, tenant)
    right = []
    for _ in range(40):
        kind = world.choice(list(rates))
        body = _recommend(client, types, ["feature_tour", "send_coupon"],
                          context={"plan": kind[0], "region": kind[1]})
        picked = body["recommendation"]["action"]
        right.append(picked == max(rates[kind], key=rates[kind].get))
        _act(client, types, picked, "completed" if world.random() < rates[kind][picked] else "ignored",
             decision_id=body["decision_id"])
    assert sum(right[24:]) >= 12
    body = _recommend(client, types, ["feature_tour", "send_coupon"], context={"plan": "ent", "region": "us"})
    assert "succeeded for segment (lifecycle_stage=" in body["recommendation"]["reasoning"]
    assert "plan=ent, region=us, risk_level=" in body["recommendation"]["reasoning"]


def test_decision_features_name_traits(client, tenant, types, rt):
    assert client.patch("/api/settings", headers=auth(tenant.key),
                        json={"config": {"decision_features": ["plan"]}}).status_code == 200
    _user(client, tenant, traits={"plan": "pro", "seats": 5})
    body = _recommend(client, types, ["award_points"])
    with rt.session(tenant.id) as s:
        assert s.get(DecisionLog, body["decision_id"]).features == {
            "plan": "pro", "lifecycle_stage": body["user_context"]["lifecycle_stage"],
            "risk_level": body["user_context"]["risk_level"]}
    bad = client.patch("/api/settings", headers=auth(tenant.key), json={"config": {"decision_features": "plan"}})
    assert bad.status_code == 400 and bad.json["details"][0]["field"].startswith("config.decision_features")


def test_needs_decide_and_a_known_user(client, tenant):
    _user(client, tenant)
    reader = tenant.issue("editor", ["read"])
    decider = tenant.issue("editor", ["decide"])
    body = {"user_id": "u1", "available_actions": ["a"]}
    assert client.post("/api/decisions/recommend", headers=auth(reader), json=body).status_code == 403
    resp = client.post("/api/decisions/recommend", headers=auth(decider), json=body)
    assert resp.status_code == 200 and resp.json["propensity"] == 1.0
    assert client.post("/api/decisions/recommend", headers=auth(decider),
                       json={"user_id": "ghost", "available_actions": ["a"]}).status_code == 404
    assert client.post("/api/decisions/recommend", headers=auth(decider),
                       json={"user_id": "u1", "available_actions": []}).status_code == 400


def test_an_action_name_longer_than_an_action_types_is_refused_and_nothing_is_logged(client, tenant, rt):
    _user(client, tenant)
    body = {"user_id": "u1", "available_actions": ["a", "x" * 101]}
    resp = client.post("/api/decisions/recommend", headers=auth(tenant.key), json=body)
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed"
    assert "available_actions" in resp.json["details"][0]["field"]
    with rt.session(tenant.id) as s:
        assert s.scalars(select(DecisionLog)).all() == []
    body["available_actions"] = ["a", "x" * 100]
    assert client.post("/api/decisions/recommend", headers=auth(tenant.key), json=body).status_code == 200
