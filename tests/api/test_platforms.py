"""Pre-built platform connectors (docs/external-actions.md, "Platforms")."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from cs_daemon.config import Settings
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
    assert {t["delivery_webhook"] for t in types} == {"{base_url}/hooks/award-points",
                                                      "{base_url}/hooks/grant-reward"}
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


def _everything_stored(settings, rt, *, files: bool = True) -> str:
    """Every row of every table as text, and on SQLite the database files' raw bytes."""
    from sqlalchemy import select

    from cs_daemon.db import get_engine
    from cs_daemon.models import metadata

    rt_engine = get_engine(settings)
    parts = []
    with rt_engine.connect() as conn:
        for table in metadata.sorted_tables:
            parts += [repr(tuple(row)) for row in conn.execute(select(table))]
    if settings.is_sqlite and files:
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


def test_connect_leaves_a_tenants_own_type_of_the_same_name_alone(client, tenant):
    """The template's award_points would have taken over the tenant's own one (its URL,
    schema and provider), and disconnect would then have deactivated it."""
    h = auth(tenant.key)
    mine = client.post("/api/external/action-types", headers=h, json={
        "name": "award_points", "description": "ours", "provider": "loyaltyco", "parameters_schema": {},
        "delivery_webhook": "http://127.0.0.1:9/points"}).json["action_type"]
    resp = client.post("/api/external/platforms/loyalty/connect", headers=h,
                       json={"credentials": {"base_url": "http://127.0.0.1:9/loyal", "api_key": "k"}})
    assert resp.status_code == 409 and resp.json["code"] == "conflict" and "'award_points'" in resp.json["error"]
    [kept] = [t for t in client.get("/api/external/action-types", headers=h).json["action_types"]
              if t["name"] == "award_points"]
    assert (kept["id"], kept["provider"], kept["description"], kept["active"]) == (mine["id"], "loyaltyco", "ours", True)
    platform = [p for p in client.get("/api/external/platforms", headers=h).json["platforms"] if p["id"] == "loyalty"]
    assert platform[0]["connected"] is False      # nothing of the connect stayed
    assert {t["name"] for t in client.get("/api/external/action-types", headers=h).json["action_types"]} == {
        "award_points"}


# -- credentials are filled in at dispatch time, and shown nowhere ---------------------------

TOKEN = "xoxb-7c1f9e0b-team-chat-secret"


def _connect_team_chat(client, tenant, receiver, secrets: dict | None = None) -> str:
    secret_url = f"{receiver.url}/T0/B0/{TOKEN}"       # a chat webhook URL is itself the credential
    resp = client.post("/api/external/platforms/team_chat/connect", headers=auth(tenant.key),
                       json={"credentials": {"webhook_url": secret_url}})
    assert resp.status_code == 200, resp.json
    if secrets is not None:
        secrets.update(resp.json["webhook_secrets"])
    return secret_url


def _post_message(client, tenant):
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "x"}]})
    resp = client.post("/api/external/actions", headers=h, json={
        "action_type": "post_message", "user_id": "u1", "parameters": {"text": "u1 looks at risk"}})
    assert resp.status_code == 201, resp.json
    return resp.json["action"]["id"]


def _run_dispatches(rt, tenant):
    from sqlalchemy import select

    from cs_daemon.delivery import service as delivery
    from cs_daemon.delivery.models import Delivery

    with rt.session(tenant.id) as s:
        ids = s.scalars(select(Delivery.id).where(Delivery.status.in_(("pending", "retrying")))).all()
    return [delivery.attempt(rt, i) for i in ids]


def test_platform_credentials_are_filled_at_dispatch_and_appear_nowhere(client, tenant, rt, settings, clock,
                                                                        receiver, caplog):
    caplog.set_level("DEBUG")
    h = auth(tenant.key)
    signing: dict = {}
    secret_url = _connect_team_chat(client, tenant, receiver, signing)
    assert set(signing) == {"post_message"} and len(signing["post_message"]) == 64   # shown this once
    again = client.post("/api/external/platforms/team_chat/connect", headers=h,
                        json={"credentials": {"webhook_url": secret_url}})
    assert again.status_code == 200 and again.json["webhook_secrets"] == {}          # kept, not shown again
    [listed] = client.get("/api/external/action-types", headers=h).json["action_types"]
    assert listed["delivery_webhook"] == "{webhook_url}"
    receiver.script = [("redirect", secret_url), 200]       # the first answer names the URL back
    action_id = _post_message(client, tenant)
    assert _run_dispatches(rt, tenant) == ["retrying"]
    clock.advance(seconds=30)
    assert _run_dispatches(rt, tenant) == ["delivered"]
    assert [r.path for r in receiver.requests] == [f"/hook/T0/B0/{TOKEN}"] * 2    # filled when sent
    sent = receiver.requests[-1]                          # the tenant can check the signature with it
    assert sent.headers["X-Service-Signature"] == hmac.new(signing["post_message"].encode(), sent.body,
                                                           hashlib.sha256).hexdigest()
    reads = ["/api/external/action-types", "/api/external/platforms", "/api/external/actions?user_id=u1",
             "/api/settings"]
    for path in reads:
        resp = client.get(path, headers=h)
        assert resp.status_code == 200 and TOKEN not in resp.text, path
    from cs_daemon.delivery import service as delivery
    from cs_daemon.external import service as external

    with rt.session(tenant.id) as s:
        made = external.dispatch_of(s, action_id)
        [refused, ok] = delivery.attempts_of(s, [made.id])[made.id]
    assert made.url == "platform:team_chat:{webhook_url}"
    assert refused.error == "redirect 302 not followed (to [credential])" and ok.status_code == 200
    assert TOKEN not in _everything_stored(settings, rt)
    assert TOKEN not in caplog.text


def test_a_dispatch_after_disconnect_fails_without_its_credentials(client, tenant, rt, receiver):
    _connect_team_chat(client, tenant, receiver)
    _post_message(client, tenant)
    assert client.post("/api/external/platforms/team_chat/disconnect", headers=auth(tenant.key)).status_code == 200
    assert _run_dispatches(rt, tenant) == ["retrying"]
    assert receiver.requests == []
    from cs_daemon.delivery.models import DeliveryAttempt

    with rt.session(tenant.id) as s:
        [attempt] = s.query(DeliveryAttempt).all()
    assert attempt.error == "URL unavailable: LookupError: platform team_chat is not connected"


@pytest.fixture
def own_database(backend, tmp_path, request, sqlite_template):
    """A database of this test's own (it is taken down a migration and back up)."""
    import uuid

    import psycopg

    from cs_daemon.db import dispose_engines
    from tests.conftest import PG, REDIS, _pg_conninfo

    if backend == "embedded":
        yield Settings(cs_data_dir=tmp_path / "own", database_url=None, redis_url=None, cs_secret_key="test-secret")
        dispose_engines()
        return
    name = f"cs_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield Settings(cs_data_dir=tmp_path, database_url=f"{PG}/{name}", redis_url=REDIS,
                   cs_redis_prefix=f"cstest-{uuid.uuid4().hex[:8]}", cs_secret_key="test-secret",
                   allow_private_webhook_urls=True)
    dispose_engines()
    with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.filterwarnings("ignore:Skipped unsupported reflection of expression-based index")
def test_the_migration_takes_credentials_out_of_urls_stored_before_it(own_database, clock, receiver):
    """Before this change a platform type's URL and its dispatches' were stored filled."""
    from alembic import command
    from sqlalchemy import text

    from cs_daemon import migrate
    from cs_daemon.db import get_engine
    from cs_daemon.runtime import Runtime
    from cs_daemon.tenants import service as tenants
    from webapp import create_app

    migrate.upgrade(own_database)
    rt = Runtime(own_database, clock)
    with rt.session() as s:
        made = tenants.create(s, name="Old", owner_email="o@old.example", now=rt.now())
    client = create_app(runtime=rt).test_client()
    handle = type("T", (), {"key": made.key.secret, "id": made.tenant.id})
    secret_url = _connect_team_chat(client, handle, receiver)
    _post_message(client, handle)
    with get_engine(own_database).begin() as conn:      # what the code before this change stored
        conn.execute(text("UPDATE action_types SET delivery_webhook = :u"), {"u": secret_url})
        conn.execute(text("UPDATE deliveries SET url = :u WHERE kind = 'dispatch'"), {"u": secret_url})
    command.downgrade(migrate.alembic_config(own_database), "0019-1")
    migrate.upgrade(own_database)
    with get_engine(own_database).connect() as conn:
        assert conn.execute(text("SELECT delivery_webhook FROM action_types")).scalar_one() == "{webhook_url}"
        assert conn.execute(text("SELECT url FROM deliveries")).scalar_one() == "platform:team_chat:{webhook_url}"
    # (rows only: SQLite's files may keep the bytes of the rows as they were before)
    assert TOKEN not in _everything_stored(own_database, rt, files=False)
    assert _run_dispatches(rt, handle) == ["delivered"]
    assert [r.path for r in receiver.requests] == [f"/hook/T0/B0/{TOKEN}"]
