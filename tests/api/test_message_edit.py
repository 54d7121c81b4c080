"""`PATCH /api/interventions/{id}` `{message_body}` (an extension): a person rewrites the
message of a planned intervention before approving it, and the quality checks run again
on the new text (docs/api.md, "Editing a planned message")."""

from __future__ import annotations

import pytest

from tests.conftest import auth


@pytest.fixture
def world(client, make_tenant):
    tenant = make_tenant("Crew", plan_tier="growth")
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u1", "event": "$identify", "properties": {"email": "u1@x.io", "name": "Ada"}}]})
    client.patch("/api/settings/brand", headers=h, json={"things_to_avoid": ["discount"]})
    pid = client.post("/api/playbooks", headers=h, json={"name": "p", "strategy_hints": {"tone": "formal"}}).json["id"]
    return tenant, pid


def _planned(client, tenant, pid, channel="in_app", key=None) -> str:
    resp = client.post("/api/interventions", headers=auth(key or tenant.key),
                       json={"user_id": "u1", "playbook_id": pid, "channel": channel, "message_body": "Hello Ada"})
    assert resp.status_code == 201, resp.json
    return resp.json["id"]


def _checks(body) -> dict:
    return {c["check"]: c["passed"] for c in body["quality_checks"]}


def test_an_edit_stores_the_message_and_reruns_the_quality_checks(client, world):
    tenant, pid = world
    iv = _planned(client, tenant, pid)
    resp = client.patch(f"/api/interventions/{iv}", headers=auth(tenant.key),
                        json={"message_body": "Hey {{name}}, a DISCOUNT awaits!!!"})
    assert resp.status_code == 200, resp.json
    body = resp.json
    assert set(body) == {"id", "status", "message_body", "quality_checks"}
    assert body["id"] == iv and body["status"] == "planned"
    assert body["message_body"] == "Hey {{name}}, a DISCOUNT awaits!!!"
    # the brand's things_to_avoid, the placeholder, the formal tone of the playbook's hints
    assert _checks(body) == {"things_to_avoid": False, "placeholders": False, "length": True, "tone": False}

    fixed = client.patch(f"/api/interventions/{iv}", headers=auth(tenant.key),
                         json={"message_body": "Dear Ada, your dashboard is ready."}).json
    assert all(_checks(fixed).values())
    [item] = [i for i in client.get("/api/interventions", headers=auth(tenant.key)).json["interventions"]
              if i["id"] == iv]
    assert item["message_body"] == "Dear Ada, your dashboard is ready." and item["quality_checks"] == fixed["quality_checks"]


def test_the_length_check_follows_the_channel(client, world):
    tenant, pid = world
    iv = _planned(client, tenant, pid, channel="in_app")
    body = client.patch(f"/api/interventions/{iv}", headers=auth(tenant.key), json={"message_body": "a" * 281}).json
    assert _checks(body)["length"] is False


def test_only_a_planned_intervention_is_edited(client, world):
    tenant, pid = world
    iv = _planned(client, tenant, pid, channel="webhook")
    assert client.put(f"/api/interventions/{iv}/approve", headers=auth(tenant.key)).status_code == 200
    resp = client.patch(f"/api/interventions/{iv}", headers=auth(tenant.key), json={"message_body": "Later"})
    assert resp.status_code == 404 and resp.json["code"] == "invalid_state"
    missing = client.patch("/api/interventions/6f1c2e9a-9a55-4b8e-9d0e-2f4b8f3c1d11", headers=auth(tenant.key),
                           json={"message_body": "x"})
    assert missing.status_code == 404 and missing.json["code"] == "not_found"


def test_bad_bodies_are_400_and_change_nothing(client, world):
    tenant, pid = world
    iv = _planned(client, tenant, pid)
    for payload, field in (({}, "message_body"), ({"message_body": ""}, "message_body"),
                           ({"message_body": 7}, "message_body"), ({"message_body": "x" * 20001}, "message_body")):
        resp = client.patch(f"/api/interventions/{iv}", headers=auth(tenant.key), json=payload)
        assert resp.status_code == 400 and resp.json["details"][0]["field"] == field
    [item] = [i for i in client.get("/api/interventions", headers=auth(tenant.key)).json["interventions"]
              if i["id"] == iv]
    assert item["message_body"] == "Hello Ada"


def test_roles_test_mode_and_tenants_hold(client, world, make_tenant):
    tenant, pid = world
    iv = _planned(client, tenant, pid)
    viewer = tenant.issue(role="viewer")
    resp = client.patch(f"/api/interventions/{iv}", headers=auth(viewer), json={"message_body": "x"})
    assert resp.status_code == 403 and resp.json["code"] == "forbidden"
    test_key = tenant.issue(role="admin", test=True)
    refused = client.patch(f"/api/interventions/{iv}", headers=auth(test_key), json={"message_body": "x"})
    assert refused.status_code == 403
    mine = _planned(client, tenant, pid, key=test_key)
    assert client.patch(f"/api/interventions/{mine}", headers=auth(test_key),
                        json={"message_body": "Test text"}).status_code == 200
    other = make_tenant("Other")
    resp = client.patch(f"/api/interventions/{iv}", headers=auth(other.key), json={"message_body": "x"})
    assert resp.status_code == 404 and resp.json["code"] == "not_found"


def test_the_openapi_document_describes_the_edit(client):
    doc = client.get("/api/openapi.json").json
    op = doc["paths"]["/api/interventions/{intervention_id}"]["patch"]
    assert "200" in op["responses"] and "404" in op["responses"]
    ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert body["required"] == ["message_body"]
    answered = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert set(doc["components"]["schemas"][answered.rsplit("/", 1)[1]]["properties"]) == {
        "id", "status", "message_body", "quality_checks"}
