"""Team members and invitations (docs/api.md, "Team")."""

from __future__ import annotations

from tests.conftest import auth


def _invite(client, tenant, email="ed@acme.example", role="editor", key=None):
    return client.post("/api/team/invite", headers=auth(key or tenant.key), json={"email": email, "role": role})


def test_invite_accept_and_the_new_key_follows_its_role(client, tenant):
    resp = _invite(client, tenant)
    assert resp.status_code == 201
    inv = resp.json["invitation"]
    assert {"id", "email", "role", "status", "expires_at", "created_at", "invited_by", "token"} <= set(inv)
    assert inv["status"] == "pending" and inv["invited_by"] == tenant.member_id
    listed = client.get("/api/team/invitations", headers=auth(tenant.key)).json["invitations"]
    assert [i["id"] for i in listed] == [inv["id"]] and "token" not in listed[0]
    resp = client.post("/api/team/accept", json={"token": inv["token"]})
    assert resp.status_code == 200
    body = resp.json
    assert body["tenant_id"] == tenant.id and body["role"] == "editor" and body["api_key"].startswith("rt_live_")
    key = body["api_key"]
    assert client.patch("/api/settings", headers=auth(key), json={"name": "N"}).status_code == 200
    assert client.put("/api/settings/kill-switch", headers=auth(key), json={"active": True}).status_code == 403
    members = client.get("/api/team/members", headers=auth(tenant.key)).json["members"]
    assert {m["email"] for m in members} == {"owner@acme.example", "ed@acme.example"}
    ed = [m for m in members if m["email"] == "ed@acme.example"][0]
    assert set(ed) == {"id", "user_id", "role", "created_at", "name", "email"}
    # role change follows into the key; removal stops it
    resp = client.put(f"/api/team/members/{ed['id']}/role", headers=auth(tenant.key), json={"role": "admin"})
    assert resp.json["member"]["role"] == "admin"
    assert client.put("/api/settings/kill-switch", headers=auth(key), json={"active": False}).status_code == 200
    [listed] = [k for k in client.get("/api/settings", headers=auth(tenant.key)).json["api_keys"]
                if k["label"] == "personal key of ed@acme.example"]
    assert listed["role"] == "admin" and listed["revoked_at"] is None    # the list shows the role it acts with
    assert client.delete(f"/api/team/members/{ed['id']}", headers=auth(tenant.key)).json == {"removed": True}
    assert client.get("/api/settings", headers=auth(key)).status_code == 401
    assert listed["id"] not in {k["id"] for k in client.get("/api/settings", headers=auth(tenant.key)).json["api_keys"]}
    assert client.get("/api/team/invitations", headers=auth(tenant.key)).json["invitations"] == []


def test_a_member_is_named_by_the_accept(client, tenant):
    token = _invite(client, tenant).json["invitation"]["token"]
    assert 'id="name"' in client.get(f"/api/team/accept?token={token}").get_data(as_text=True)   # the page asks
    resp = client.post("/api/team/accept", json={"token": token, "name": ""})
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "name"
    resp = client.post("/api/team/accept", json={"token": token, "name": "Ed Editor"})
    assert resp.status_code == 200
    members = client.get("/api/team/members", headers=auth(tenant.key)).json["members"]
    assert {m["email"]: m["name"] for m in members} == {"owner@acme.example": None, "ed@acme.example": "Ed Editor"}


def test_accept_refusals(client, make_tenant, clock):
    tenant = make_tenant("Acme", plan_tier="starter")
    token = _invite(client, tenant).json["invitation"]["token"]
    assert client.post("/api/team/accept", json={"token": "6f1c2e9a-9a55-4b8e-9d0e-2f4b8f3c1d11"}).status_code == 404
    assert client.post("/api/team/accept", json={"token": "nope"}).status_code == 400
    assert client.post("/api/team/accept", json={"token": token}).status_code == 200
    again = client.post("/api/team/accept", json={"token": token})
    assert again.status_code == 409 and again.json["code"] == "conflict"
    late = _invite(client, tenant, "late@acme.example").json["invitation"]["token"]
    clock.advance(days=7, seconds=1)
    resp = client.post("/api/team/accept", json={"token": late})
    assert resp.status_code == 410 and resp.json["code"] == "gone"


def test_team_limit_counts_members_and_pending_invitations(client, tenant):
    assert _invite(client, tenant, "a@acme.example").status_code == 201   # trial: 2 seats, owner + 1
    resp = _invite(client, tenant, "b@acme.example")
    assert resp.status_code == 403 and resp.json["code"] == "plan_limit"
    assert (resp.json["current"], resp.json["limit"], resp.json["upgrade_to"]) == (2, 2, "starter")


def test_already_a_member_is_409_and_bad_input_400(client, tenant):
    assert _invite(client, tenant, "owner@acme.example").status_code == 409
    assert _invite(client, tenant, "not-an-email").status_code == 400
    assert _invite(client, tenant, "x@acme.example", role="owner").status_code == 400


def test_admin_only_and_last_admin_rules(client, tenant):
    editor_key = tenant.issue("editor", ["full"])
    assert _invite(client, tenant, key=editor_key).status_code == 403
    h = auth(tenant.key)
    owner = client.get("/api/team/members", headers=h).json["members"][0]
    resp = client.delete(f"/api/team/members/{owner['id']}", headers=h)
    assert resp.status_code == 400 and "yourself" in resp.json["error"]
    resp = client.put(f"/api/team/members/{owner['id']}/role", headers=h, json={"role": "viewer"})
    assert resp.status_code == 400 and "last admin" in resp.json["error"]
    unbound_admin = tenant.issue("admin", ["full"])
    resp = client.delete(f"/api/team/members/{owner['id']}", headers=auth(unbound_admin))
    assert resp.status_code == 400 and "last admin" in resp.json["error"]
    assert client.delete("/api/team/members/nope", headers=h).status_code == 404
    assert client.put("/api/team/members/nope/role", headers=h, json={"role": "viewer"}).status_code == 404


def test_revoke_invitation(client, tenant, make_tenant):
    inv = _invite(client, tenant).json["invitation"]
    other = make_tenant("Other")
    assert client.delete(f"/api/team/invitations/{inv['id']}", headers=auth(other.key)).status_code == 404
    assert client.delete(f"/api/team/invitations/{inv['id']}", headers=auth(tenant.key)).json == {"revoked": True}
    assert client.post("/api/team/accept", json={"token": inv["token"]}).status_code == 404
    assert client.delete(f"/api/team/invitations/{inv['id']}", headers=auth(tenant.key)).status_code == 404


def test_two_admins_demoting_or_removing_each_other_at_once_leave_one_admin(app, client, make_tenant):
    """Real concurrent requests to a real server: each request counted the other admin as
    the one remaining, and the tenant was left with none."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import requests

    from tests.support.sse import AppServer

    server = AppServer(app)
    try:
        for kind in ("role", "remove"):
            tenant = make_tenant(f"Pair{kind}", plan_tier="growth")
            token = _invite(client, tenant, email=f"second-{kind}@acme.example", role="admin").json["invitation"]["token"]
            second = client.post("/api/team/accept", json={"token": token}).json["api_key"]
            members = {m["email"]: m["id"] for m in client.get("/api/team/members", headers=auth(tenant.key)).json["members"]}
            owner, other = members[f"owner@pair{kind}.example"], members[f"second-{kind}@acme.example"]
            start = threading.Barrier(8)

            def act(key_and_target):
                key, target = key_and_target
                url = f"{server.url}/api/team/members/{target}"
                start.wait()
                if kind == "role":
                    return requests.put(url + "/role", headers=auth(key), json={"role": "viewer"}, timeout=30)
                return requests.delete(url, headers=auth(key), timeout=30)

            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(act, [(tenant.key, other), (second, owner)] * 4))
            assert {r.status_code for r in answers} <= {200, 400, 401, 403, 404}, [r.text for r in answers]
            left = [m for m in client.get("/api/team/members", headers=auth(tenant.issue("admin", ["full"])))
                    .json["members"] if m["role"] == "admin"]
            assert len(left) == 1, (kind, [(r.status_code, r.text) for r in answers])
    finally:
        server.close()
