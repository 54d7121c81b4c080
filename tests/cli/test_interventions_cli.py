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
