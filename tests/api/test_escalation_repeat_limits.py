"""An escalation is one of its playbook's interventions for the playbook's own repeat
limits (docs/decisions.md, "Steps and verdicts"): an untriggered escalation playbook
escalates a user once, not on every sweep, and a cooldown spaces its escalations."""

from __future__ import annotations

from sqlalchemy import select

from cs_daemon.decisions import requests
from cs_daemon.interventions.models import Intervention
from tests.conftest import NO_HOLDOUT, auth

PRO = {"field": "traits.plan", "op": "eq", "value": "pro"}


def _escalating(client, tenant, **constraints):
    h = auth(tenant.key)
    resp = client.post("/api/playbooks", headers=h, json={
        "name": "call them", "entry_conditions": PRO, "constraints": constraints,
        "strategy_hints": {"escalate": {"severity": "High"}}})
    assert resp.status_code == 201, resp.json
    assert client.put(f"/api/playbooks/{resp.json['id']}/status", headers=h,
                      json={"status": "active"}).status_code == 200
    resp = client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u1", "event": "$identify", "properties": {"email": "u1@x.io", "plan": "pro"}}]})
    assert resp.status_code == 200, resp.json


def _escalations(rt, tenant):
    with rt.session(tenant.id) as s:
        return list(s.scalars(select(Intervention.status).where(Intervention.channel == "escalate")))


def test_an_untriggered_escalation_playbook_escalates_a_user_once(client, make_tenant, rt, clock):
    tenant = make_tenant(config=dict(NO_HOLDOUT))
    _escalating(client, tenant)
    assert requests.sweep_tenant(rt, tenant.id, rt.now()) == 1
    clock.advance(minutes=1)
    assert requests.sweep_tenant(rt, tenant.id, rt.now()) == 0
    assert _escalations(rt, tenant) == ["open"]
    with rt.session(tenant.id) as s:                        # handled, it still was this user's one
        s.execute(Intervention.__table__.update().values(status="handled"))
    clock.advance(minutes=1)
    assert requests.sweep_tenant(rt, tenant.id, rt.now()) == 0
    assert _escalations(rt, tenant) == ["handled"]


def test_an_escalation_playbooks_cooldown_spaces_its_escalations(client, make_tenant, rt, clock):
    tenant = make_tenant(config=dict(NO_HOLDOUT))
    _escalating(client, tenant, cooldown_hours=24)
    assert requests.sweep_tenant(rt, tenant.id, rt.now()) == 1
    clock.advance(hours=23, minutes=59)
    assert requests.sweep_tenant(rt, tenant.id, rt.now()) == 0
    clock.advance(minutes=1)
    assert requests.sweep_tenant(rt, tenant.id, rt.now()) == 1
    assert _escalations(rt, tenant) == ["open", "open"]
