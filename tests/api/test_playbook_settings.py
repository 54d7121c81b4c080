"""Playbook constraints, strategy hints and condition trees are typed and bounded on
every write (docs/decisions.md, "Constraints and hints"; docs/conditions.md, "Limits"),
and conditions compare booleans."""

from __future__ import annotations

import pytest

from cs_daemon.errors import ValidationFailed
from cs_daemon.playbooks import service
from tests.conftest import auth


def _deep(depth: int) -> dict:
    tree = {"field": "health", "op": "gt", "value": 1}
    for _ in range(depth - 1):
        tree = {"not": tree}
    return tree


BAD = [
    ({"constraints": {"cooldown_hours": "x"}}, "constraints.cooldown_hours"),
    ({"constraints": {"cooldown_hours": "24"}}, "constraints.cooldown_hours"),       # a number, not text
    ({"constraints": {"cooldown_hours": 1e308}}, "constraints.cooldown_hours"),      # past ten years
    ({"constraints": {"max_per_user": True}}, "constraints.max_per_user"),
    ({"constraints": {"max_per_day": 2.5}}, "constraints.max_per_day"),
    ({"constraints": {"min_confidence": "0.5"}}, "constraints.min_confidence"),
    ({"constraints": {"require_approval": "yes"}}, "constraints.require_approval"),
    ({"constraints": {"quiet_hours": {"start": 2200, "end": "07:00"}}}, "constraints.quiet_hours.start"),
    ({"constraints": {"channels": "email"}}, "constraints.channels"),
    ({"constraints": ["email"]}, "constraints"),
    ({"strategy_hints": {"priority": "hi"}}, "strategy_hints.priority"),
    ({"strategy_hints": {"priority": 5000}}, "strategy_hints.priority"),
    ({"strategy_hints": {"preferred_channel": "fax"}}, "strategy_hints.preferred_channel"),
    ({"strategy_hints": {"goal": 7}}, "strategy_hints.goal"),
    ({"strategy_hints": {"escalate": {"severity": 3}}}, "strategy_hints.escalate.severity"),
    ({"entry_conditions": {"event": "x", "within_days": 1e6}}, "entry_conditions.within_days"),
    ({"exit_conditions": {"all": [{"event": "x", "within_days": 0}]}}, "exit_conditions.all[0].within_days"),
    ({"entry_conditions": _deep(11)}, "entry_conditions" + ".not" * 10),
    ({"entry_conditions": {"any": [{"field": "health", "op": "gt", "value": 1}] * 250}}, "entry_conditions.any[199]"),
]


@pytest.mark.parametrize("fields, field", BAD, ids=[f for _, f in BAD])
def test_a_bad_playbook_is_refused_naming_the_field_and_nothing_is_stored(client, tenant, fields, field):
    h = auth(tenant.key)
    resp = client.post("/api/playbooks", headers=h, json={"name": "x", **fields})
    assert resp.status_code == 400, resp.json
    assert resp.json["code"] == "validation_failed"
    assert field in [d["field"] for d in resp.json["details"]], resp.json["details"]
    assert client.get("/api/playbooks", headers=h).json["playbooks"] == []
    made = client.post("/api/playbooks", headers=h, json={"name": "kept"}).json
    resp = client.put(f"/api/playbooks/{made['id']}", headers=h, json=fields)
    assert resp.status_code == 400 and field in [d["field"] for d in resp.json["details"]]
    [kept] = client.get("/api/playbooks", headers=h).json["playbooks"]
    assert {k: kept[k] for k in ("entry_conditions", "exit_conditions", "constraints", "strategy_hints")} == {
        k: made[k] for k in ("entry_conditions", "exit_conditions", "constraints", "strategy_hints")}


@pytest.mark.parametrize("fields, field", [b for b in BAD if b[1].startswith(("constraints", "strategy_hints"))])
def test_the_service_checks_every_caller_not_only_the_api(rt, tenant, fields, field):
    with rt.session(tenant.id) as s:
        with pytest.raises(ValidationFailed) as err:
            service.create(s, tenant.id, {"name": "x", **fields}, now=rt.now())
        assert field in [d["field"] for d in err.value.extra["details"]]
        made = service.create(s, tenant.id, {"name": "ok"}, now=rt.now())
        with pytest.raises(ValidationFailed):
            service.update(s, made.id, fields, now=rt.now())


def test_preview_count_refuses_an_oversized_tree_naming_the_path(client, tenant):
    resp = client.post("/api/playbooks/preview-count", headers=auth(tenant.key),
                       json={"entry_conditions": {"all": [_deep(10)]}})
    assert resp.status_code == 400
    assert resp.json["details"][0]["field"] == "entry_conditions.all[0]" + ".not" * 9


def test_conditions_compare_booleans_through_the_api(client, tenant):
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [
        {"user_id": "a", "event": "$identify", "properties": {"beta": True}},
        {"user_id": "b", "event": "$identify", "properties": {"beta": False}},
        {"user_id": "c", "event": "$identify", "properties": {"beta": 1}},
        {"user_id": "d", "event": "$identify", "properties": {"beta": "true"}},
        {"user_id": "e", "event": "$identify", "properties": {"plan": "pro"}}]})

    def count(tree):
        resp = client.post("/api/playbooks/preview-count", headers=h, json={"entry_conditions": tree})
        assert resp.status_code == 200, resp.json
        return resp.json["matching_users"]

    assert count({"field": "traits.beta", "op": "neq", "value": False}) == 3   # as nin [false]: 1 and "true" differ
    assert count({"field": "traits.beta", "op": "eq", "value": True}) == 1
    assert count({"field": "traits.beta", "op": "in", "value": [True, False]}) == 2
    assert count({"field": "traits.beta", "op": "nin", "value": [False]}) == 3
    resp = client.post("/api/playbooks", headers=h, json={
        "name": "betas", "entry_conditions": {"field": "traits.beta", "op": "neq", "value": False}})
    assert resp.status_code == 201 and resp.json["entry_conditions"]["value"] is False
