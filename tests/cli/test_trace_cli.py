"""cs interventions trace, the decisions in cs customers show and the ai line of cs
analytics (docs/decisions.md, "The decision trace")."""

from __future__ import annotations

import json

import pytest

from cs_daemon.learning import service as learning
from tests.api.test_engine_learning import _decide_owed, _playbook, _signup, _tied
from tests.conftest import NO_HOLDOUT, auth


@pytest.fixture(autouse=True)
def seeded():
    learning.RANDOM.seed(19)


@pytest.fixture
def tenant(make_tenant):
    return make_tenant(config=dict(NO_HOLDOUT))


@pytest.fixture
def decided(client, tenant, rt):
    """An engine decision the learner made between two tied playbooks; the intervention."""
    tour, checklist = _tied(client, tenant)
    _signup(client, tenant.key)
    _decide_owed(rt, tenant)
    [iv] = client.get("/api/interventions", headers=auth(tenant.key)).json["interventions"]
    return iv


def test_the_trace_as_json_is_the_endpoints(cs, client, tenant, decided):
    code, out, _ = cs("interventions", "trace", decided["id"], "--json")
    assert code == 0
    body = json.loads(out)
    api = client.get(f"/api/interventions/{decided['id']}/trace", headers=auth(tenant.key)).json
    assert body == api
    assert body["trace"]["decision_id"] == decided["decision_id"] and body["trace"]["decided_by"] == "learner"


def test_the_trace_rendered_shows_every_part(cs, tenant, decided):
    code, out, _ = cs("interventions", "trace", decided["id"])
    assert code == 0
    for shown in (decided["decision_id"], "decided by learner", "propensity", "Features", "lifecycle_stage",
                  "Rules", "tour", "checklist", "picked", "eligible", "Options", "0.5", "Drafts",
                  decided["message_body"].split()[0], "tokens 0"):
        assert shown in out, shown


def test_a_trace_that_is_not_there_is_one_line(cs, client, tenant):
    pid = _playbook(client, tenant, "nudge")
    client.post("/api/customers", headers=auth(tenant.key), json={"user_id": "u9", "email": "u9@x.io"})
    manual = client.post("/api/interventions", headers=auth(tenant.key), json={
        "user_id": "u9", "playbook_id": pid, "channel": "email", "message_body": "hi"}).json["id"]
    for missing in (manual, "no-such-id"):
        code, out, err = cs("interventions", "trace", missing, "--json")
        assert code == 1 and json.loads(out)["code"] == "not_found"
        code, out, err = cs("interventions", "trace", missing)
        assert code == 1 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_customers_show_lists_the_decisions_with_no_action_ones(cs, client, tenant, rt, clock, decided):
    for _ in range(2):                       # the other playbook acts, then neither may again
        clock.advance(minutes=1)
        _signup(client, tenant.key)
        _decide_owed(rt, tenant)
    code, out, _ = cs("customers", "show", "u1", "--tenant", tenant.id, "--json")
    assert code == 0
    latest, second, first = json.loads(out)["decisions"]
    assert second["action"] == "send" and second["playbook_id"] != first["playbook_id"]
    assert latest["action"] == "none" and "max_per_user" in latest["reason"]
    assert first["decision_id"] == decided["decision_id"]
    code, out, _ = cs("customers", "show", "u1", "--tenant", tenant.id)
    assert code == 0 and "Decisions" in out and "max_per_user" in out and decided["decision_id"] in out


def test_analytics_shows_the_ai_block(cs, tenant, decided):
    code, out, _ = cs("analytics", "--tenant", tenant.id, "--json")
    assert code == 0
    assert json.loads(out)["ai"] == {"decisions": 1, "agent_decisions": 0, "fallbacks_by_reason": {}, "tokens": 0}
    code, out, _ = cs("analytics", "--tenant", tenant.id)
    assert code == 0 and "Decisions 1 (the agent made 0); model tokens 0; agent fallbacks: none" in out
