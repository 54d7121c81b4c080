"""cs team list / invite and cs analytics."""

from __future__ import annotations

import json

from tests.conftest import auth


def test_team_invite_and_list(cs, tenant, client):
    code, out, _ = cs("team", "invite", "ed@acme.example", "--role", "editor", "--tenant", tenant.id, "--json")
    assert code == 0
    invited = json.loads(out)
    assert invited["role"] == "editor" and invited["token"]
    assert client.post("/api/team/accept", json={"token": invited["token"]}).status_code == 200
    code, out, _ = cs("team", "list", "--tenant", tenant.id, "--json")
    assert {m["email"] for m in json.loads(out)["members"]} == {"owner@acme.example", "ed@acme.example"}
    code, out, _ = cs("team", "list", "--tenant", tenant.id)
    assert code == 0 and "ed@acme.example" in out
    code, _, err = cs("team", "invite", "x@acme.example", "--role", "boss", "--tenant", tenant.id)
    assert code != 0 and "--role" in err
    code, _, err = cs("team", "invite", "ed@acme.example", "--tenant", tenant.id)
    assert code == 1 and "already a member" in err


def test_analytics_json_and_panels(cs, tenant, client):
    client.post("/api/track", headers=auth(tenant.key), json={"events": [
        {"user_id": "a", "event": "x"}, {"user_id": "b", "event": "churned"}]})
    code, out, _ = cs("analytics", "--tenant", tenant.id, "--range", "7d", "--json")
    body = json.loads(out)
    assert code == 0 and body["range"] == "7d" and body["kpis"]["total_users"] == 2
    code, out, _ = cs("analytics", "--tenant", tenant.id)
    assert code == 0 and "Lifecycle stages" in out and "█" in out and "users" in out
    code, _, err = cs("analytics", "--tenant", tenant.id, "--range", "1y")
    assert code != 0 and "--range" in err


def test_tenant_create_names_its_owner(cs, client):
    code, out, _ = cs("tenant", "create", "Named", "--owner-email", "ann@named.example", "--owner-name", "Ann",
                      "--json")
    made = json.loads(out)
    members = client.get("/api/team/members", headers=auth(made["api_key"])).json["members"]
    assert code == 0 and [m["name"] for m in members] == ["Ann"]
    code, _, err = cs("tenant", "create", "Blank", "--owner-email", "b@blank.example", "--owner-name", " ")
    assert code == 2 and "--owner-name" in err
