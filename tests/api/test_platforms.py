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


SECRET_CREDENTIAL = "sk-loyal-7c1f9e0b-not-for-your-eyes"


def _everything_stored(settings, rt) -> str:
    """Every row of every table as text, and on SQLite the database files' raw bytes."""
    from sqlalchemy import select

    from cs_daemon.db import get_engine
    from cs_daemon.models import metadata

    rt_engine = get_engine(settings)
    parts = []
    with rt_engine.connect() as conn:
        for table in metadata.sorted_tables:
            parts += [repr(tuple(row)) for row in conn.execute(select(table))]
    if settings.is_sqlite:
        for path in settings.cs_data_dir.glob("cs.db*"):
            parts.append(path.read_bytes().decode("latin-1"))
    return "\n".join(parts)


def test_credentials_are_nowhere_in_the_database_in_plain_text(client, tenant, rt, settings):
    h = auth(tenant.key)
    resp = client.post("/api/external/platforms/loyalty/connect", headers=h,
                       json={"credentials": {"base_url": "http://127.0.0.1:9/loyal", "api_key": SECRET_CREDENTIAL}})
    assert resp.status_code == 200
    assert SECRET_CREDENTIAL not in resp.text and SECRET_CREDENTIAL not in client.get(
        "/api/external/platforms", headers=h).text
    stored = _everything_stored(settings, rt)
    assert "award_points" in stored                       # the scan does see what was written
    assert SECRET_CREDENTIAL not in stored
    assert SECRET_CREDENTIAL.encode().hex() not in stored


def test_disconnect_deactivates_exactly_the_templates_types(client, tenant):
    h = auth(tenant.key)
    mine = client.post("/api/external/action-types", headers=h, json={
        "name": "send_gift", "description": "a hand-made type", "provider": "loyalty", "parameters_schema": {},
        "delivery_webhook": "http://127.0.0.1:9/gifts"})
    assert mine.status_code == 201
    for platform, credentials in (("loyalty", {"base_url": "http://127.0.0.1:9/loyal", "api_key": "k"}),
                                  ("team_chat", {"webhook_url": "http://127.0.0.1:9/chat"})):
        resp = client.post(f"/api/external/platforms/{platform}/connect", headers=h, json={"credentials": credentials})
        assert resp.status_code == 200, resp.json
    assert client.post("/api/external/platforms/loyalty/disconnect", headers=h).status_code == 200
    active = {t["name"]: t["active"] for t in client.get("/api/external/action-types", headers=h).json["action_types"]}
    team_chat = set([p for p in client.get("/api/external/platforms", headers=h).json["platforms"]
                     if p["id"] == "team_chat"][0]["action_types"])
    assert active == {"award_points": False, "grant_reward": False, "send_gift": True,
                      **{name: True for name in team_chat}}
