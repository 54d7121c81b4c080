"""POST /api/decisions/evaluate and `cs decide evaluate`: self-normalised IPS, and doubly
robust once the learner has counts, over the logged recommendations with an outcome
(docs/decisions.md, "Evaluating a policy")."""

from __future__ import annotations

import random
from datetime import timedelta

from cs_daemon.decisions.recommend import SCOPE
from cs_daemon.learning import service
from cs_daemon.learning.models import DecisionLog
from tests.conftest import auth

RATES = {"award_points": 0.2, "send_coupon": 0.5, "feature_tour": 0.7}


def _log_uniformly(rt, tenant, n, *, seed=1, test=False, age=timedelta(0)):
    """Decisions logged by a uniform random policy over the three actions, with outcomes
    drawn from known success rates."""
    world = random.Random(seed)
    options = [{"option": a, "estimate": 0.5} for a in RATES]
    with rt.session(tenant.id) as s:
        for _ in range(n):
            choice = world.choice(list(RATES))
            s.add(DecisionLog(kind="recommend", scope="action", user_id="u1", features={"plan": "smb"},
                              options=options, choice=choice, propensity=1 / 3, decided_by="learner", test=test,
                              created_at=rt.now() - age, success=world.random() < RATES[choice],
                              outcome_at=rt.now()))


# kinds of users answer the actions differently
BY_PLAN = {"smb": {"award_points": 0.1, "send_coupon": 0.7, "feature_tour": 0.3},
           "ent": {"award_points": 0.6, "send_coupon": 0.1, "feature_tour": 0.5}}


def _log_and_learn_uniformly(rt, tenant, n, *, seed):
    """Uniformly logged decisions over two plans, each outcome also training the learner
    as a settled live outcome does."""
    world = random.Random(seed)
    options = [{"option": a, "estimate": 0.5} for a in RATES]
    with rt.session(tenant.id) as s:
        for _ in range(n):
            plan, choice = world.choice(list(BY_PLAN)), world.choice(list(RATES))
            success = world.random() < BY_PLAN[plan][choice]
            s.add(DecisionLog(kind="recommend", scope=SCOPE, user_id="u1", features={"plan": plan},
                              options=options, choice=choice, propensity=1 / 3, decided_by="learner",
                              created_at=rt.now(), success=success, outcome_at=rt.now()))
            service.learn(s, tenant.id, SCOPE, choice, {"plan": plan}, success)


def _evaluate(client, key, **body):
    resp = client.post("/api/decisions/evaluate", headers=auth(key), json=body)
    assert resp.status_code == 200, resp.json
    return resp.json


def test_recovers_each_actions_known_success_rate_from_uniform_logs(client, tenant, rt):
    _log_uniformly(rt, tenant, 900)
    body = _evaluate(client, tenant.issue("viewer", ["read"]))
    assert body["decisions"] == 900
    got = {e["policy"]: e for e in body["estimates"]}
    assert set(got) == {"current", "uniform", "action:award_points", "action:send_coupon", "action:feature_tour"}
    for action, rate in RATES.items():
        low, high = got[f"action:{action}"]["ci"]
        assert low <= rate <= high and high - low < 0.2
    low, high = got["uniform"]["ci"]
    assert low <= sum(RATES.values()) / 3 <= high and got["uniform"]["decisions"] == 900


def test_without_logged_outcomes_there_is_no_estimate(client, tenant):
    body = _evaluate(client, tenant.key)
    assert body == {"decisions": 0, "estimates": [
        {"policy": "current", "success_rate": None, "ci": None, "decisions": 0},
        {"policy": "uniform", "success_rate": None, "ci": None, "decisions": 0}]}


def test_since_and_test_data_narrow_the_decisions(client, tenant, rt):
    _log_uniformly(rt, tenant, 30, age=timedelta(days=10))
    _log_uniformly(rt, tenant, 20, seed=2)
    _log_uniformly(rt, tenant, 25, seed=3, test=True)
    since = (rt.now() - timedelta(days=1)).isoformat()
    assert _evaluate(client, tenant.key)["decisions"] == 50
    assert _evaluate(client, tenant.key, since=since)["decisions"] == 20


def test_needs_decide_or_read(client, tenant):
    body = {}
    assert client.post("/api/decisions/evaluate", headers=auth(tenant.issue("editor", ["decide"])),
                       json=body).status_code == 200
    assert client.post("/api/decisions/evaluate", headers=auth(tenant.issue("editor", ["manage"])),
                       json=body).status_code == 403
    bad = client.post("/api/decisions/evaluate", headers=auth(tenant.key), json={"since": "yesterday"})
    assert bad.status_code == 400 and bad.json["details"][0]["field"] == "since"


def test_doubly_robust_recovers_a_fixed_policy_within_a_narrower_interval(client, tenant, rt):
    _log_and_learn_uniformly(rt, tenant, 900, seed=5)
    got = {e["policy"]: e for e in _evaluate(client, tenant.key)["estimates"]}
    truths = {f"action:{a}": sum(rates[a] for rates in BY_PLAN.values()) / 2 for a in RATES}
    truths["uniform"] = sum(sum(rates.values()) for rates in BY_PLAN.values()) / 6
    for policy, truth in truths.items():
        low, high = got[policy]["doubly_robust"]["ci"]
        assert low <= got[policy]["doubly_robust"]["estimate"] <= high and low <= truth <= high, (policy, got[policy])
        if policy != "action:feature_tour":     # its success barely depends on the plan
            assert high - low <= got[policy]["ci"][1] - got[policy]["ci"][0], got[policy]
    assert "doubly_robust" in got["current"]
