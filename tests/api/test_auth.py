"""Keys, roles and permissions through the declarative access table (docs/api.md, "Authentication and access")."""

from __future__ import annotations

import pytest

from tests.conftest import auth


def test_missing_and_malformed_keys_are_401_with_www_authenticate(client):
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"},
                    auth("rt_live_" + "a" * 32)):
        resp = client.get("/api/settings", headers=headers)
        assert resp.status_code == 401
        assert resp.json["code"] == "unauthorized"
        assert resp.json["error"]
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")


def test_401_challenge_is_exactly_bearer(client):
    # decisions and docs/api.md give the header as `WWW-Authenticate: Bearer`
    for headers in ({}, auth("rt_test_" + "a" * 32)):
        assert client.get("/api/playbooks", headers=headers).headers["WWW-Authenticate"] == "Bearer"


def test_revoked_key_gets_401(client, tenant):
    key = tenant.issue("editor", ["full"])
    assert client.get("/api/settings", headers=auth(key)).status_code == 200
    key_id = [k["id"] for k in client.get("/api/settings", headers=auth(tenant.key)).json["api_keys"]
              if k["prefix"] == key[:12]][0]
    resp = client.delete(f"/api/settings/api-keys/{key_id}", headers=auth(tenant.key))
    assert resp.status_code == 200 and resp.json == {"revoked": True}
    resp = client.get("/api/settings", headers=auth(key))
    assert resp.status_code == 401
    assert resp.json["code"] == "unauthorized"


def test_viewer_key_gets_403_on_patch(client, tenant):
    viewer = tenant.issue("viewer", ["full"])
    assert client.get("/api/settings", headers=auth(viewer)).status_code == 200
    resp = client.patch("/api/settings", json={"name": "X"}, headers=auth(viewer))
    assert resp.status_code == 403
    assert resp.json["code"] == "forbidden"
    assert client.get("/api/settings", headers=auth(tenant.key)).json["tenant"]["name"] == "Acme"


def test_ingest_only_key_gets_403_on_settings(client, tenant):
    ingest = tenant.issue("editor", ["ingest"])
    assert client.get("/api/settings", headers=auth(ingest)).status_code == 403
    assert client.patch("/api/settings", json={"name": "X"}, headers=auth(ingest)).status_code == 403


def test_read_permission_reads_but_cannot_write(client, tenant):
    reader = tenant.issue("admin", ["read"])
    assert client.get("/api/settings", headers=auth(reader)).status_code == 200
    assert client.patch("/api/settings", json={"name": "X"}, headers=auth(reader)).status_code == 403
    assert client.put("/api/settings/kill-switch", json={"active": True},
                      headers=auth(reader)).status_code == 403


def test_key_secret_is_never_listed_and_digest_only_stored(client, tenant, rt):
    from cs_daemon.auth.models import ApiKey

    body = client.get("/api/settings", headers=auth(tenant.key)).json
    assert tenant.key not in str(body)
    [item] = body["api_keys"]
    assert item["prefix"] == tenant.key[:12]
    assert set(item) >= {"id", "prefix", "label", "scope", "last_used_at", "created_at"}
    assert item["scope"] == {"permissions": ["full"]}
    with rt.session() as s:
        stored = s.get(ApiKey, item["id"])
        assert tenant.key not in (stored.digest, stored.prefix)
        assert len(stored.digest) == 64


def test_last_used_at_is_recorded_at_most_once_a_minute(client, tenant, clock):
    def last_used():
        keys = client.get("/api/settings", headers=auth(tenant.key)).json["api_keys"]
        return keys[0]["last_used_at"]

    first = last_used()
    assert first is not None
    clock.advance(seconds=30)
    assert last_used() == first
    clock.advance(seconds=31)
    assert last_used() != first


@pytest.mark.parametrize("backend", ["postgres"])   # row locks
def test_a_write_requests_stamp_holds_no_key_row_and_is_made_after_commit(client, tenant, rt, clock):
    """Stamped inside the request's transaction, the key's row was held until commit: a
    request revoking that key (removing its member) waited for this one while this one
    waited for a lock that one held, a deadlock (two admins removing each other)."""
    from sqlalchemy import text, update

    from cs_daemon.auth.models import ApiKey
    from cs_daemon.auth.service import touch

    with rt.session(tenant.id) as s:
        key_id = s.query(ApiKey.id).filter(ApiKey.prefix == tenant.key[:12]).scalar()
    clock.advance(seconds=61)
    with rt.session(tenant.id) as holder:
        touch(holder, key_id, tenant.id, rt.now())
        with rt.session(tenant.id) as other:
            if other.get_bind().dialect.name == "postgresql":
                other.execute(text("SET LOCAL lock_timeout = '2s'"))
                other.execute(update(ApiKey).where(ApiKey.id == key_id).values(label="revoking"))   # not held
            other.rollback()
        assert holder.get(ApiKey, key_id).last_used_at != rt.now()   # not yet: after commit
        stamped = rt.now()
    with rt.session(tenant.id) as s:
        assert s.get(ApiKey, key_id).last_used_at == stamped
    assert client.get("/api/settings", headers=auth(tenant.key)).status_code == 200


def test_member_key_follows_member_role(client, tenant, rt):
    from cs_daemon.team.models import Member

    member_id = tenant.add_member("ed@acme.example", "editor")
    key = tenant.issue("admin", ["full"], member_id=member_id)
    # the key says admin, but its member is an editor: admin-only endpoints refuse it
    assert client.put("/api/settings/kill-switch", json={"active": True}, headers=auth(key)).status_code == 403
    with rt.session(tenant.id) as s:
        s.get(Member, member_id).role = "admin"
    assert client.put("/api/settings/kill-switch", json={"active": True}, headers=auth(key)).status_code == 200
    with rt.session(tenant.id) as s:
        s.get(Member, member_id).removed_at = rt.now()
    assert client.get("/api/settings", headers=auth(key)).status_code == 401


def test_api_key_extension_issue_and_revoke(client, tenant):
    resp = client.post("/api/settings/api-keys", headers=auth(tenant.key),
                       json={"label": "ci", "role": "editor", "permissions": ["ingest"], "test": True})
    assert resp.status_code == 201
    body = resp.json
    assert body["api_key"].startswith("rt_test_") and len(body["api_key"]) == 40
    assert body["prefix"] == body["api_key"][:12]
    assert body["scope"] == {"permissions": ["ingest"]} and body["test"] is True
    listed = client.get("/api/settings", headers=auth(tenant.key)).json["api_keys"]
    assert body["id"] in [k["id"] for k in listed]
    assert body["api_key"] not in str(listed)
    assert client.delete(f"/api/settings/api-keys/{body['id']}", headers=auth(tenant.key)).status_code == 200
    assert client.get("/api/settings", headers=auth(body["api_key"])).status_code == 401


def _mint(client, key, **body):
    resp = client.post("/api/settings/api-keys", headers=auth(key),
                       json={"role": "admin", "permissions": ["full"], **body})
    assert resp.status_code == 201, resp.json
    return resp.json


def test_minted_keys_belong_to_their_minter_and_are_revoked_with_a_removed_member(client, tenant):
    member = tenant.add_member("mo@acme.example", "admin")
    members_key = tenant.issue("admin", ["full"], member_id=member)
    by_member = _mint(client, members_key, label="ci")
    by_key = _mint(client, by_member["api_key"], label="minted by a key")   # a key tied to no member
    by_owner = _mint(client, tenant.key, label="owner's")
    assert by_member["created_by"] == member and by_owner["created_by"] == tenant.member_id
    assert by_key["created_by"] == f"key:{by_member['id']}"
    listed = {k["id"]: k for k in client.get("/api/settings", headers=auth(tenant.key)).json["api_keys"]}
    assert {listed[k["id"]]["created_by"] for k in (by_member, by_key, by_owner)} == {
        member, f"key:{by_member['id']}", tenant.member_id}
    assert listed[tenant.key_id]["created_by"] is None        # made by the operator's CLI

    assert client.delete(f"/api/team/members/{member}", headers=auth(tenant.key)).status_code == 200
    for gone in (members_key, by_member["api_key"], by_key["api_key"]):
        assert client.get("/api/settings", headers=auth(gone)).status_code == 401
    assert client.get("/api/settings", headers=auth(by_owner["api_key"])).status_code == 200
    active = {k["id"] for k in client.get("/api/settings", headers=auth(tenant.key)).json["api_keys"]}
    assert by_member["id"] not in active and by_key["id"] not in active and by_owner["id"] in active


@pytest.mark.parametrize("payload", [
    {"role": "owner", "permissions": ["full"]},
    {"role": "admin", "permissions": ["everything"]},
    {"role": "admin", "permissions": []},
])
def test_api_key_extension_rejects_bad_input(client, tenant, payload):
    before = client.get("/api/settings", headers=auth(tenant.key)).json["api_keys"]
    resp = client.post("/api/settings/api-keys", headers=auth(tenant.key), json=payload)
    assert resp.status_code == 400
    assert resp.json["code"] == "validation_failed" and resp.json["details"]
    assert client.get("/api/settings", headers=auth(tenant.key)).json["api_keys"] == before


def test_api_keys_are_admin_only(client, tenant):
    editor = tenant.issue("editor", ["full"])
    assert client.post("/api/settings/api-keys", headers=auth(editor),
                       json={"role": "viewer", "permissions": ["read"]}).status_code == 403
    assert client.delete(f"/api/settings/api-keys/{tenant.key_id}", headers=auth(editor)).status_code == 403


def test_another_tenants_key_id_is_404(client, tenant, make_tenant):
    other = make_tenant("Globex")
    resp = client.delete(f"/api/settings/api-keys/{other.key_id}", headers=auth(tenant.key))
    assert resp.status_code == 404 and resp.json["code"] == "not_found"
    assert client.get("/api/settings", headers=auth(other.key)).status_code == 200


def test_settings_show_only_own_tenant(client, tenant, make_tenant):
    other = make_tenant("Globex")
    mine = client.get("/api/settings", headers=auth(tenant.key)).json
    theirs = client.get("/api/settings", headers=auth(other.key)).json
    assert mine["tenant"]["id"] == tenant.id and theirs["tenant"]["id"] == other.id
    assert {k["id"] for k in mine["api_keys"]}.isdisjoint({k["id"] for k in theirs["api_keys"]})
