"""cs interventions: list and the review actions from a terminal."""

from __future__ import annotations

import json

from tests.conftest import auth


def _planned(client, tenant):
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u1", "event": "$identify", "properties": {"email": "u1@x.io"}}]})
    pid = client.post("/api/playbooks", headers=h, json={"name": "p"}).json["id"]
    return client.post("/api/interventions", headers=h,
                       json={"user_id": "u1", "playbook_id": pid, "channel": "email", "message_body": "Hi"}).json["id"]


def test_reject_with_reason_and_list(cs, tenant, client):
    iv = _planned(client, tenant)
    code, out, _ = cs("interventions", "reject", iv, "--reason", "too pushy", "--json")
    assert code == 0 and json.loads(out) == {"id": iv, "status": "rejected", "flagged": False}
    code, out, _ = cs("interventions", "list", "--tenant", tenant.id, "--json")
    [item] = json.loads(out)["interventions"]
    assert item["id"] == iv and item["status"] == "rejected"
    code, out, _ = cs("interventions", "list", "--tenant", tenant.id)
    assert code == 0 and "rejected" in out


def test_refusals_are_one_line(cs, tenant, client):
    iv = _planned(client, tenant)
    cs("interventions", "reject", iv, "--reason", "no")
    code, _, err = cs("interventions", "approve", iv)
    assert code == 1 and "cannot approve" in err and len(err.strip().splitlines()) == 1
    code, _, err = cs("interventions", "pause", "missing-id")
    assert code == 1 and "no intervention" in err
    code, _, err = cs("interventions", "reject", iv)
    assert code != 0 and "--reason" in err


def test_list_filters_by_status(cs, tenant, client):
    kept, dropped = _planned(client, tenant), _planned(client, tenant)
    cs("interventions", "reject", dropped, "--reason", "no")
    code, out, _ = cs("interventions", "list", "--tenant", tenant.id, "--status", "planned", "--json")
    assert code == 0 and [i["id"] for i in json.loads(out)["interventions"]] == [kept]
    code, _, err = cs("interventions", "list", "--tenant", tenant.id, "--status", "lost")
    assert code == 1 and "unknown status 'lost'" in err and len(err.strip().splitlines()) == 1


def test_escalations_list(cs, tenant, client):
    h = auth(tenant.key)
    _planned(client, tenant)
    pid = client.get("/api/playbooks", headers=h).json["playbooks"][0]["id"]
    esc = client.post("/api/escalations", headers=h, json={
        "user_id": "u1", "playbook_id": pid, "severity": "High", "reason": "asked for a refund"}).json["id"]
    code, out, _ = cs("escalations", "list", "--tenant", tenant.id, "--json")
    [item] = json.loads(out)["escalations"]
    assert code == 0 and item["id"] == esc and item["status"] == "open" and item["severity"] == "High"
    code, out, _ = cs("escalations", "list", "--tenant", tenant.id, "--status", "handled", "--json")
    assert json.loads(out) == {"escalations": []}
    code, out, _ = cs("escalations", "list", "--tenant", tenant.id)
    assert code == 0 and "High" in out and "open" in out


def test_a_flag_needs_a_reason_as_the_api_says(cs, tenant, client):
    iv = _planned(client, tenant)
    code, out, _ = cs("interventions", "flag", iv, "--reason", "", "--json")
    assert code == 1 and json.loads(out)["code"] == "validation_failed" and "reason" in json.loads(out)["error"]
    resp = client.put(f"/api/interventions/{iv}/flag", headers=auth(tenant.key), json={"reason": ""})
    assert resp.status_code == 400
    [item] = client.get("/api/interventions", headers=auth(tenant.key)).json["interventions"]
    assert item["flagged"] is False                              # neither way flagged it
    code, out, _ = cs("interventions", "flag", iv, "--reason", "tone", "--json")
    assert code == 0 and json.loads(out)["flagged"] is True


def test_reasons_are_as_long_as_the_api_takes(cs, tenant, client):
    iv = _planned(client, tenant)
    for verb in ("reject", "rollback"):
        code, _, err = cs("interventions", verb, iv, "--reason", "r" * 2001)
        assert code == 1 and "at most 2000 characters" in err and len(err.strip().splitlines()) == 1
    assert client.get("/api/interventions", headers=auth(tenant.key)).json["interventions"][0]["status"] == "planned"
