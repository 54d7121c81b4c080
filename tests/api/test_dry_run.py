"""POST /api/interventions/dry-run (docs/decisions.md)."""

from __future__ import annotations

from sqlalchemy import func, select

from cs_daemon.interventions.models import Intervention
from tests.conftest import auth


def _setup(client, tenant):
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u1", "event": "$identify", "properties": {"email": "u1@x.io", "plan": "pro"}},
        {"user_id": "u1", "event": "signed_up"}]})
    ids = {}
    for name, body in {
        "welcome": {"entry_conditions": {"trigger": {"event": "signed_up"},
                                         "all": [{"field": "traits.plan", "op": "eq", "value": "pro"}]},
                    "strategy_hints": {"priority": 1, "preferred_channel": "in_app"}},
        "no-invite": {"entry_conditions": {"event": "invited_teammate", "count": {"op": "eq", "value": 0}},
                      "constraints": {"channels": ["crm"], "min_confidence": 0.99}},
        "churned": {"entry_conditions": {"field": "lifecycle_stage", "op": "eq", "value": "churned"}},
    }.items():
        pid = client.post("/api/playbooks", headers=h, json={"name": name, **body}).json["id"]
        client.put(f"/api/playbooks/{pid}/status", headers=h, json={"status": "active"})
        ids[name] = pid
    return ids


def test_dry_run_decides_explains_and_creates_nothing(client, tenant, rt):
    ids = _setup(client, tenant)
    key = tenant.issue("editor", ["decide"])
    resp = client.post("/api/interventions/dry-run", headers=auth(key), json={"user_id": "u1"})
    assert resp.status_code == 200, resp.json
    body = resp.json
    assert body["dry_run"] is True
    d = body["decision"]
    assert (d["action"], d["playbook_id"], d["channel"]) == ("send", ids["welcome"], "in_app")
    assert d["reasoning"] and 0 < d["confidence"] <= 1
    assert body["context"]["matched_playbooks"] == 2
    assert set(body["context"]) == {"lifecycle_stage", "activation_score", "risk_level", "matched_playbooks"}
    rules = body["rules"]
    assert rules[ids["welcome"]]["verdict"] == "picked"
    assert rules[ids["no-invite"]]["verdict"] == "rejected" and "min_confidence" in rules[ids["no-invite"]]["why"]
    assert rules[ids["churned"]]["verdict"] == "not_matched"
    with rt.session(tenant.id) as s:
        assert s.scalar(select(func.count()).select_from(Intervention)) == 0


def test_dry_run_says_why_none(client, tenant):
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u2", "event": "x"}]})
    body = client.post("/api/interventions/dry-run", headers=h, json={"user_id": "u2"}).json
    assert body["decision"]["action"] == "none" and body["decision"]["reason"] == "no active playbooks"
    # the spec types the decision's fields as strings and a number, none nullable: a field
    # without a value is left out, never null (docs/api.md, "Other choices")
    assert body["decision"] == {"action": "none", "reason": "no active playbooks"}


def test_dry_run_with_the_kill_switch_on_decides_nothing_and_still_shows_the_verdicts(client, tenant):
    ids = _setup(client, tenant)
    h = auth(tenant.key)
    client.put("/api/settings/kill-switch", headers=h, json={"active": True})
    body = client.post("/api/interventions/dry-run", headers=h, json={"user_id": "u1"}).json
    assert body["decision"] == {"action": "none", "reason": "the kill switch is on"}
    assert body["context"]["matched_playbooks"] == 2 and body["rules"][ids["welcome"]]["verdict"] == "picked"
    client.put("/api/settings/kill-switch", headers=h, json={"active": False})
    body = client.post("/api/interventions/dry-run", headers=h, json={"user_id": "u1"}).json
    assert body["decision"]["action"] == "send"


def test_dry_run_decision_that_sends_has_no_null_field(client, tenant):
    _setup(client, tenant)
    d = client.post("/api/interventions/dry-run", headers=auth(tenant.key), json={"user_id": "u1"}).json["decision"]
    assert d["action"] == "send" and None not in d.values()
    assert {"playbook_id", "channel", "reasoning", "confidence"} <= set(d) and "reason" not in d


def test_dry_run_unknown_user_is_404_and_needs_decide(client, tenant, make_tenant):
    h = auth(tenant.key)
    assert client.post("/api/interventions/dry-run", headers=h, json={"user_id": "ghost"}).status_code == 404
    other = make_tenant("Other")
    client.post("/api/track", headers=auth(other.key), json={"events": [{"user_id": "theirs", "event": "x"}]})
    assert client.post("/api/interventions/dry-run", headers=h, json={"user_id": "theirs"}).status_code == 404
    assert client.post("/api/interventions/dry-run", headers=h, json={"user_id": ""}).status_code == 400
    reader = tenant.issue("editor", ["read"])
    assert client.post("/api/interventions/dry-run", headers=auth(reader), json={"user_id": "x"}).status_code == 403


def test_a_changed_playbook_is_decided_on_as_it_is_now(client, tenant):
    """The compiled playbooks are kept per process; an edit or a status change, even in
    the same instant (the clock does not move here), must not be decided on with the old
    ones."""
    ids = _setup(client, tenant)
    h = auth(tenant.key)

    def decision():
        return client.post("/api/interventions/dry-run", headers=h, json={"user_id": "u1"}).json

    assert decision()["decision"]["playbook_id"] == ids["welcome"]
    client.put(f"/api/playbooks/{ids['welcome']}", headers=h, json={"entry_conditions": {
        "all": [{"field": "traits.plan", "op": "eq", "value": "enterprise"}]}})
    after_edit = decision()
    assert after_edit["rules"][ids["welcome"]]["verdict"] == "not_matched"
    assert after_edit["context"]["matched_playbooks"] == 1
    client.put(f"/api/playbooks/{ids['no-invite']}/status", headers=h, json={"status": "paused"})
    after_pause = decision()
    assert ids["no-invite"] not in after_pause["rules"] and after_pause["context"]["matched_playbooks"] == 0
