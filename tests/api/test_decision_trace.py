"""Every engine decision (also one that ends in no action), dry run and recommendation has
a decision_id and a trace: the user's features, each playbook's verdict and why, the
options with the learner's estimates and the propensity, the agent's steps, the drafts,
the choice and who made it; kept for config.trace_retention_days (docs/decisions.md,
"The decision trace")."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sqlalchemy import func, select

from cs_daemon.decisions import actors as decision_jobs
from cs_daemon.decisions import trace
from cs_daemon.decisions.models import DecisionTrace
from cs_daemon.engine.decisions import Decision
from cs_daemon.interventions.models import Intervention
from cs_daemon.jobs import heartbeat
from cs_daemon.learning import service as learning
from cs_daemon.learning.models import DecisionLog
from tests.api.test_engine_learning import _decide_owed, _playbook, _signup, _tied
from tests.api.test_holdout import _signed_up, users_of
from tests.conftest import NO_HOLDOUT, auth


@pytest.fixture(autouse=True)
def seeded():
    learning.RANDOM.seed(19)


@pytest.fixture
def tenant(make_tenant):
    return make_tenant(config=dict(NO_HOLDOUT))


def _traces(rt, tenant_id) -> list[DecisionTrace]:
    with rt.session(tenant_id) as s:
        return list(s.scalars(select(DecisionTrace).order_by(DecisionTrace.created_at, DecisionTrace.id)))


def _intervention(client, tenant) -> dict:
    [iv] = client.get("/api/interventions", headers=auth(tenant.key)).json["interventions"]
    return iv


def test_the_trace_of_an_engine_decision_has_every_part(client, tenant, rt):
    tour, checklist = _tied(client, tenant)
    minor = _playbook(client, tenant, "minor", strategy_hints={"priority": 1})
    _signup(client, tenant.key)
    _decide_owed(rt, tenant)
    iv = _intervention(client, tenant)
    assert iv["decision_id"]
    resp = client.get(f"/api/interventions/{iv['id']}/trace", headers=auth(tenant.issue("viewer", ["read"])))
    assert resp.status_code == 200, resp.json
    t = resp.json["trace"]
    assert {"decision_id", "user_id", "decided_by", "features", "rules", "options", "propensity", "agent",
            "drafts", "choice", "created_at"} <= set(t)
    assert (t["decision_id"], t["user_id"], t["decided_by"], t["kind"]) == (iv["decision_id"], "u1", "learner", "engine")
    assert t["features"]["lifecycle_stage"] and "risk_level" in t["features"]
    rules = {r["playbook_id"]: r for r in t["rules"]}
    assert set(rules) == {tour, checklist, minor}
    picked = iv["playbook_id"]
    other = checklist if picked == tour else tour
    assert rules[picked]["verdict"] == "picked" and rules[other]["verdict"] == "eligible"
    assert rules[minor]["verdict"] == "eligible" and rules[minor]["why"]
    assert rules[picked]["estimate"]["estimate"] == 0.5
    assert {o["option"] for o in t["options"]} == {tour, checklist}
    assert all(o["scope"] == "playbook" and o["estimate"] == 0.5 and o["trials"] == 0 for o in t["options"])
    assert sum(o["probability"] for o in t["options"]) == pytest.approx(1)
    chosen = next(o for o in t["options"] if o["option"] == picked)
    assert 0 < t["propensity"] < 1 and t["propensity"] == chosen["probability"]
    assert t["agent"] == {"steps": [], "fallback_reason": None} and t["tokens"] == 0
    [draft] = t["drafts"]
    assert draft["message"] == iv["message_body"] and draft["option_id"] == f"{picked}:email"
    assert draft["checks"] and all({"check", "passed"} <= set(c) for c in draft["checks"])
    assert t["choice"]["action"] == "send" and t["choice"]["playbook_id"] == picked
    assert t["choice"]["channel"] == "email" and "the learner picked it among 2" in t["choice"]["reasoning"]
    assert t["intervention_id"] == iv["id"]
    with rt.session(tenant.id) as s:
        [row] = s.scalars(select(DecisionLog)).all()
    assert row.decision_id == iv["decision_id"]


def test_a_manual_intervention_has_no_decision_id_and_no_trace(client, tenant):
    pid = _playbook(client, tenant, "nudge")
    client.post("/api/customers", headers=auth(tenant.key), json={"user_id": "u9", "email": "u9@x.io"})
    resp = client.post("/api/interventions", headers=auth(tenant.key),
                       json={"user_id": "u9", "playbook_id": pid, "channel": "email", "message_body": "hi"})
    assert resp.status_code == 201, resp.json
    iv = _intervention(client, tenant)
    assert iv["decision_id"] is None
    resp = client.get(f"/api/interventions/{iv['id']}/trace", headers=auth(tenant.key))
    assert resp.status_code == 404 and resp.json["code"] == "not_found"
    resp = client.get("/api/interventions/no-such-id/trace", headers=auth(tenant.key))
    assert resp.status_code == 404 and resp.json["code"] == "not_found"


def test_another_tenants_intervention_has_no_trace_here(client, tenant, make_tenant, rt):
    _tied(client, tenant)
    _signup(client, tenant.key)
    _decide_owed(rt, tenant)
    iv = _intervention(client, tenant)
    other = make_tenant("Other", config=dict(NO_HOLDOUT))
    resp = client.get(f"/api/interventions/{iv['id']}/trace", headers=auth(other.key))
    assert resp.status_code == 404 and resp.json["code"] == "not_found"


def test_a_decision_that_ends_in_no_action_is_among_the_customers_decisions(client, tenant, rt, clock):
    pid = _playbook(client, tenant, "welcome", strategy_hints={"preferred_channel": "email"})
    _signup(client, tenant.key)
    _decide_owed(rt, tenant)
    clock.advance(minutes=5)
    _signup(client, tenant.key)            # signed up again: the playbook acts once per user
    _decide_owed(rt, tenant)
    body = client.get("/api/customers/u1", headers=auth(tenant.key)).json
    latest, first = body["decisions"]
    assert latest["action"] == "none" and latest["intervention_id"] is None
    assert "max_per_user reached (1 of 1)" in latest["reason"] and latest["decided_by"] == "rules"
    [iv] = body["interventions"]
    assert (first["action"], first["playbook_id"], first["channel"]) == ("send", pid, "email")
    assert first["intervention_id"] == iv["id"] and first["decision_id"] == iv["decision_id"]
    assert set(latest) == {"decision_id", "created_at", "action", "decided_by", "reason", "playbook_id",
                           "channel", "intervention_id"}
    [none] = [t for t in _traces(rt, tenant.id) if t.action == "none"]
    rules = {r["playbook_id"]: r for r in none.rules}
    assert rules[pid]["verdict"] == "rejected" and "max_per_user" in rules[pid]["why"]
    assert none.propensity is None and none.drafts == [] and none.choice["action"] == "none"


def test_a_dry_run_answers_the_trace_and_writes_nothing(client, tenant, rt):
    tour, checklist = _tied(client, tenant)
    _signup(client, tenant.key)
    before = _traces(rt, tenant.id)
    resp = client.post("/api/interventions/dry-run", headers=auth(tenant.key), json={"user_id": "u1"})
    assert resp.status_code == 200, resp.json
    t = resp.json["trace"]
    assert t["decision_id"] and t["user_id"] == "u1" and t["decided_by"] == "learner"
    assert {o["option"] for o in t["options"]} == {tour, checklist} and 0 < t["propensity"] < 1
    assert {r["playbook_id"] for r in t["rules"]} == {tour, checklist}
    assert t["choice"]["playbook_id"] == resp.json["decision"]["playbook_id"]
    assert t["agent"] == {"steps": [], "fallback_reason": None}
    assert _traces(rt, tenant.id) == before
    with rt.session(tenant.id) as s:
        assert s.scalar(select(func.count()).select_from(Intervention)) == 0
        assert s.scalar(select(func.count()).select_from(DecisionLog)) == 0


def test_a_recommendation_keeps_its_trace(client, tenant, rt):
    client.post("/api/track", headers=auth(tenant.key), json={"events": [{"user_id": "u1", "event": "x"}]})
    resp = client.post("/api/decisions/recommend", headers=auth(tenant.key), json={
        "user_id": "u1", "domain": "loyalty", "available_actions": ["award_points", "send_coupon"]})
    assert resp.status_code == 200, resp.json
    body = resp.json
    [t] = [t for t in _traces(rt, tenant.id) if t.kind == "recommend"]
    assert t.id == body["decision_id"] and t.decided_by == "learner"
    assert t.action == body["recommendation"]["action"] == t.choice["action"]
    assert t.propensity == body["propensity"] and {o["option"] for o in t.options} == {"award_points", "send_coupon"}
    assert t.features["lifecycle_stage"] and t.rules == [] and t.agent == {"steps": [], "fallback_reason": None}
    with rt.session(tenant.id) as s:
        assert s.get(DecisionLog, body["decision_id"]).decision_id == body["decision_id"]


def _recommend(client, tenant, user="u1"):
    client.post("/api/track", headers=auth(tenant.key), json={"events": [{"user_id": user, "event": "x"}]})
    resp = client.post("/api/decisions/recommend", headers=auth(tenant.key),
                       json={"user_id": user, "available_actions": ["a", "b"]})
    assert resp.status_code == 200, resp.json
    return resp.json["decision_id"]


def test_the_retention_sweep_removes_traces_older_than_the_tenants_retention(client, make_tenant, rt, clock):
    rt.install_broker()
    heartbeat.beat(rt.cache)
    short = make_tenant("Short", config={**NO_HOLDOUT, "trace_retention_days": 2})
    usual = make_tenant("Usual", config=dict(NO_HOLDOUT))
    old = {t.id: _recommend(client, t) for t in (short, usual)}
    clock.advance(days=3)
    new = {t.id: _recommend(client, t) for t in (short, usual)}
    decision_jobs.sweep_traces()
    assert [t.id for t in _traces(rt, short.id)] == [new[short.id]]
    assert [t.id for t in _traces(rt, usual.id)] == [old[usual.id], new[usual.id]]
    clock.advance(days=28)                          # the first of the usual tenant is 31 days old
    decision_jobs.sweep_traces()
    assert [t.id for t in _traces(rt, usual.id)] == [new[usual.id]]
    assert _traces(rt, short.id) == []


def test_analytics_counts_decisions_agent_decisions_fallbacks_and_tokens(client, tenant, rt, clock):
    _tied(client, tenant)
    _signup(client, tenant.key)
    _decide_owed(rt, tenant)                        # an engine decision the learner made
    _recommend(client, tenant)                      # a recommendation
    now = clock.now()
    runs = [SimpleNamespace(decided_by="agent", steps=[{"step": 1, "tool": "list_options"}], fallback_reason=None,
                            tokens=300, drafts=[], choice=None),
            SimpleNamespace(decided_by="learner", steps=[], fallback_reason="timeout", tokens=40, drafts=[],
                            choice=None),
            SimpleNamespace(decided_by="learner", steps=[], fallback_reason="timeout", tokens=0, drafts=[],
                            choice=None)]
    with rt.session(tenant.id) as s:              # decisions as the agent loop leaves them in its run
        for i, run in enumerate(runs):
            made = Decision(action="none", reason="nothing to do")
            trace.store(s, tenant.id, trace.build(decision_id=f"agent-{i}", user_id="u1", decision=made,
                                                  features={}, now=now, agent=run), test=False)
        trace.store(s, tenant.id, trace.build(decision_id="test-1", user_id="u1", decision=made, features={},
                                              now=now, agent=runs[0]), test=True)      # test data: left out
    ai = client.get("/api/analytics", headers=auth(tenant.key)).json["ai"]
    assert ai == {"decisions": 5, "agent_decisions": 1, "fallbacks_by_reason": {"timeout": 2}, "tokens": 340}
    clock.advance(days=8)
    ai = client.get("/api/analytics?range=7d", headers=auth(tenant.key)).json["ai"]
    assert ai == {"decisions": 0, "agent_decisions": 0, "fallbacks_by_reason": {}, "tokens": 0}


def test_held_out_and_shadow_decisions_keep_their_trace(client, make_tenant, rt):
    tenant = make_tenant("Hold", plan_tier="growth", config={"holdout_percent": 50, "approvalMode": "full_auto"})
    pid = _playbook(client, tenant, "welcome", constraints={"channels": ["webhook"], "max_per_user": 1})
    held, treated = users_of(tenant.id, 50)
    [iv] = _signed_up(client, rt, tenant, held)
    assert iv.status == "held_out" and iv.decision_id
    t = client.get(f"/api/interventions/{iv.id}/trace", headers=auth(tenant.key)).json["trace"]
    assert (t["decision_id"], t["action"], t["playbook_id"], t["decided_by"]) == (iv.decision_id, "send", pid, "rules")
    assert t["options"] == [{"option": pid, "kind": "playbook", "estimate": None, "score": t["rules"][0]["score"],
                             "probability": 1.0}] and t["propensity"] == 1.0
    assert client.put("/api/settings/shadow-mode", headers=auth(tenant.key), json={"active": True}).status_code == 200
    [shadow] = _signed_up(client, rt, tenant, treated)
    assert shadow.status == "shadow"
    t = client.get(f"/api/interventions/{shadow.id}/trace", headers=auth(tenant.key)).json["trace"]
    assert t["decision_id"] == shadow.decision_id and t["intervention_id"] == shadow.id


def test_with_the_kill_switch_on_the_decision_says_so(client, tenant, rt):
    _playbook(client, tenant, "welcome")
    assert client.put("/api/settings/kill-switch", headers=auth(tenant.key), json={"active": True}).status_code == 200
    _signup(client, tenant.key)
    _decide_owed(rt, tenant)
    [decision] = client.get("/api/customers/u1", headers=auth(tenant.key)).json["decisions"]
    assert (decision["action"], decision["reason"], decision["decided_by"]) == ("none", "the kill switch is on", "rules")
    assert client.get("/api/interventions", headers=auth(tenant.key)).json["interventions"] == []


def test_a_no_action_decision_that_repeats_the_last_one_keeps_no_new_trace(client, rt, tenant):
    from cs_daemon.decisions import requests as decision_requests
    from cs_daemon.decisions.models import DecisionTrace
    from sqlalchemy import func, select

    client.post("/api/customers", headers=auth(tenant.key), json={"user_id": "u5", "email": "u5@x.io"})
    for _ in range(3):          # no active playbook: the same answer three times
        decision_requests.decide_for(rt, tenant.id, "u5")
    with rt.session(tenant.id) as s:
        reasons = list(s.scalars(select(DecisionTrace.reason).where(DecisionTrace.user_id == "u5")))
        assert reasons == ["no active playbooks"]
    assert client.put("/api/settings/kill-switch", headers=auth(tenant.key), json={"active": True}).status_code == 200
    decision_requests.decide_for(rt, tenant.id, "u5")      # a new reason: traced again
    with rt.session(tenant.id) as s:
        assert s.scalar(select(func.count()).select_from(DecisionTrace).where(DecisionTrace.user_id == "u5")) == 2
