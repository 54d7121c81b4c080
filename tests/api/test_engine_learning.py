"""The engine's learner: among eligible playbooks of the same top priority, and for the
channel of a playbook that lists several, the choice is learned, logged and trained by
the intervention's outcome, once (docs/decisions.md, "Learning")."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from cs_daemon.decisions import requests
from cs_daemon.decisions.models import DecisionRequest
from cs_daemon.interventions import outcomes
from cs_daemon.interventions.models import Intervention
from cs_daemon.learning import service as learning
from cs_daemon.learning.models import DecisionCount, DecisionLog
from tests.conftest import NO_HOLDOUT, auth


@pytest.fixture(autouse=True)
def seeded():
    learning.RANDOM.seed(7)


@pytest.fixture
def tenant(make_tenant):
    """A tenant whose users the engine always acts on (a random tenant id would hold a
    followed user out one run in twenty)."""
    return make_tenant(config=dict(NO_HOLDOUT))


def _playbook(client, tenant, name, **body):
    h = auth(tenant.key)
    body.setdefault("entry_conditions", {"trigger": {"event": "signed_up"}})
    pid = client.post("/api/playbooks", headers=h, json={"name": name, **body}).json["id"]
    client.put(f"/api/playbooks/{pid}/status", headers=h, json={"status": "active"})
    return pid


def _signup(client, key, user="u1"):
    resp = client.post("/api/track", headers=auth(key), json={"events": [
        {"user_id": user, "event": "$identify", "properties": {"email": f"{user}@x.io", "name": "Ada"}},
        {"user_id": user, "event": "signed_up"}]})
    assert resp.status_code == 200


def _decide_owed(rt, tenant):
    with rt.session(tenant.id) as s:
        owed = [r.id for r in s.scalars(select(DecisionRequest).where(DecisionRequest.done_at.is_(None)))]
    for request_id in owed:
        requests.process(rt, request_id)


def _settle(rt, tenant, outcome):
    """The intervention as delivered (its window open), then its outcome recorded."""
    with rt.session(tenant.id) as s:
        for iv in s.scalars(select(Intervention)).all():
            if iv.status != "delivered":
                iv.status, iv.delivered_at = "delivered", rt.now()
                outcomes.open_window(s, iv, rt.now())
                s.flush()
            outcomes.record(s, iv, outcome, now=rt.now())


def _counts(rt, tenant):
    with rt.session(tenant.id) as s:
        return {(c.scope, c.option, c.key): (c.successes, c.trials) for c in s.scalars(select(DecisionCount))}


def _tied(client, tenant):
    return [_playbook(client, tenant, name, strategy_hints={"priority": 2, "preferred_channel": "email"})
            for name in ("tour", "checklist")]


def test_dry_run_shows_the_learners_estimates_for_tied_playbooks(client, tenant):
    tour, checklist = _tied(client, tenant)
    _playbook(client, tenant, "minor", strategy_hints={"priority": 1})
    _signup(client, tenant.key)
    body = client.post("/api/interventions/dry-run", headers=auth(tenant.key), json={"user_id": "u1"}).json
    rules = body["rules"]
    assert {rules[tour]["estimate"]["estimate"], rules[checklist]["estimate"]["estimate"]} == {0.5}
    assert rules[tour]["estimate"]["probability"] + rules[checklist]["estimate"]["probability"] == pytest.approx(1)
    assert body["decision"]["playbook_id"] in (tour, checklist)
    assert "the learner picked it among 2 of priority 2" in body["decision"]["reasoning"]
    assert "estimate" not in [r for pid, r in rules.items() if pid not in (tour, checklist)][0]


def test_an_engine_decision_is_logged_and_its_outcome_trains_once(client, tenant, rt):
    _tied(client, tenant)
    _signup(client, tenant.key)
    _decide_owed(rt, tenant)
    with rt.session(tenant.id) as s:
        [iv] = s.scalars(select(Intervention)).all()
        [row] = s.scalars(select(DecisionLog)).all()
    assert (row.kind, row.choice, row.intervention_id, row.decided_by) == ("playbook", iv.playbook_id, iv.id, "learner")
    assert 0 < row.propensity <= 1 and row.features["lifecycle_stage"] and row.success is None
    _settle(rt, tenant, "positive")
    _settle(rt, tenant, "negative")          # the outcome is already recorded: nothing more counts
    assert _counts(rt, tenant)[("playbook", iv.playbook_id, "*")] == (1, 1)
    with rt.session(tenant.id) as s:
        assert s.get(DecisionLog, row.id).success is True


def test_a_test_users_outcome_does_not_train(client, tenant, rt):
    _tied(client, tenant)
    _signup(client, tenant.issue("admin", ["full"], test=True), user="t1")
    _decide_owed(rt, tenant)
    _settle(rt, tenant, "positive")
    with rt.session(tenant.id) as s:
        [row] = s.scalars(select(DecisionLog)).all()
    assert row.test is True and row.success is True
    assert _counts(rt, tenant) == {}


def test_the_learner_picks_the_channel_when_a_playbook_lists_several(client, tenant, rt):
    pid = _playbook(client, tenant, "nudge", constraints={"channels": ["in_app", "email"]})
    _signup(client, tenant.key)
    _decide_owed(rt, tenant)
    with rt.session(tenant.id) as s:
        [iv] = s.scalars(select(Intervention)).all()
        [row] = s.scalars(select(DecisionLog)).all()
    assert (row.kind, row.scope, row.choice) == ("channel", f"channel:{pid}", iv.channel)
    assert {o["option"] for o in row.options} == {"in_app", "email"}
    _settle(rt, tenant, "neutral")
    assert _counts(rt, tenant)[(f"channel:{pid}", iv.channel, "*")] == (0, 1)


def test_a_held_out_users_decision_is_logged_and_its_outcome_trains_nothing(client, make_tenant, rt):
    from cs_daemon.decisions import holdout

    tenant = make_tenant("Held", config={"holdout_percent": 50})
    user = next(f"u{i}" for i in range(100) if holdout.held_out(tenant.id, f"u{i}", 50))
    _tied(client, tenant)
    _signup(client, tenant.key, user=user)
    _decide_owed(rt, tenant)
    with rt.session(tenant.id) as s:
        [iv] = s.scalars(select(Intervention)).all()
        [row] = s.scalars(select(DecisionLog)).all()
        assert iv.status == "held_out"
        assert (row.kind, row.choice, row.intervention_id, row.user_id) == ("playbook", iv.playbook_id, iv.id, user)
        assert 0 < row.propensity <= 1 and row.features["lifecycle_stage"]
        outcomes.record(s, iv, "positive", now=rt.now())
    assert _counts(rt, tenant) == {}
