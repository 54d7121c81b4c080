"""Pre-built platform connectors (decisions §10)."""

from __future__ import annotations

from tests.conftest import auth


def test_list_connect_and_disconnect(client, tenant, rt):
    h = auth(tenant.key)
    platforms = client.get("/api/external/platforms", headers=h).json["platforms"]
    assert {p["id"] for p in platforms} == {"loyalty", "support_desk", "team_chat"}
    loyalty = [p for p in platforms if p["id"] == "loyalty"][0]
    assert set(loyalty) == {"id", "name", "description", "domain", "credential_fields", "connected", "connected_at",
                            "action_types"}
    assert loyalty["connected"] is False and loyalty["credential_fields"] == ["base_url", "api_key"]
    resp = client.post("/api/external/platforms/loyalty/connect", headers=h,
                       json={"credentials": {"base_url": "http://127.0.0.1:9/loyal", "api_key": "k-123"}})
    assert resp.status_code == 200, resp.json
    assert resp.json["platform"]["connected"] is True and resp.json["platform"]["connected_at"]
    types = client.get("/api/external/action-types?provider=loyalty", headers=h).json["action_types"]
    assert {t["name"] for t in types} == {"award_points", "grant_reward"}
    assert {t["delivery_webhook"] for t in types} == {"http://127.0.0.1:9/loyal/hooks/award-points",
                                                      "http://127.0.0.1:9/loyal/hooks/grant-reward"}
    from cs_daemon.external.models import PlatformConnection

    with rt.session(tenant.id) as s:
        [conn] = s.query(PlatformConnection).all()
        assert "k-123" not in conn.credentials_enc
    resp = client.post("/api/external/platforms/loyalty/disconnect", headers=h)
    assert resp.json["platform"]["connected"] is False
    assert all(not t["active"] for t in client.get("/api/external/action-types?provider=loyalty", headers=h).json["action_types"])
    resp = client.post("/api/external/platforms/loyalty/connect", headers=h,
                       json={"credentials": {"base_url": "http://127.0.0.1:9/loyal", "api_key": "k-456"}})
    assert resp.status_code == 200
    assert all(t["active"] for t in client.get("/api/external/action-types?provider=loyalty", headers=h).json["action_types"])


def test_connect_needs_admin_credentials_and_a_known_platform(client, tenant):
    editor = tenant.issue("editor", ["full"])
    body = {"credentials": {"webhook_url": "http://127.0.0.1:9/chat"}}
    assert client.post("/api/external/platforms/team_chat/connect", headers=auth(editor), json=body).status_code == 403
    h = auth(tenant.key)
    assert client.post("/api/external/platforms/nope/connect", headers=h, json=body).status_code == 404
    resp = client.post("/api/external/platforms/team_chat/connect", headers=h, json={"credentials": {}})
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "credentials.webhook_url"
