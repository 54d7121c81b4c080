"""The key memo (cs_daemon/auth/memo.py): an API process that has seen a key admits its
next requests without reading the database, and any committed change to the key, its
tenant or its team member - made by this process, another API process or a `cs` command -
is seen by the very next request. Production mode only (the memo's tokens live in Redis)."""

from __future__ import annotations

import psycopg
import pytest
import redis

from cs_daemon.auth import keys
from cs_daemon.auth import memo as memo_mod
from cs_daemon.auth.admission import admit
from cs_daemon.auth.memo import KeyMemo
from cs_daemon.runtime import Runtime
from cs_daemon.uow import uow_of
from tests.cli.conftest import cs  # noqa: F401 (the fixture)
from tests.conftest import REDIS, auth
from tests.support import sql

production = pytest.mark.parametrize("backend", ["postgres"])


class Statements(sql.Statements):
    """The SQL statements the runtime runs while this is open."""

    def __init__(self, rt: Runtime):
        super().__init__(rt.settings)

    @property
    def key_reads(self) -> int:
        return sum("api_keys.digest" in s for s in self.seen)


@pytest.fixture
def other(rt):
    """A second API process: its own runtime and memo, the same database and Redis."""
    from webapp import create_app

    second = Runtime(rt.settings, rt.clock)
    return second, create_app(runtime=second).test_client()


def _warm(client, key, times=3):
    for _ in range(times):
        assert client.get("/api/settings", headers=auth(key)).status_code == 200


def _key_id(client, admin_key, key) -> str:
    return [k["id"] for k in client.get("/api/settings", headers=auth(admin_key)).json["api_keys"]
            if k["prefix"] == key[:12]][0]


@production
def test_a_known_key_is_admitted_without_reading_the_database(client, tenant, rt):
    with Statements(rt) as sql:
        _warm(client, tenant.key, times=6)
    # the first request learns the key's tenant, the second reads its tokens and the key
    assert sql.key_reads == 2
    assert sum(" tenants " in f"{s} " for s in sql.seen) == 2     # nor the tenant
    settings = client.get("/api/settings", headers=auth(tenant.key)).json
    assert settings["tenant"]["id"] == tenant.id and settings["tenant"]["name"] == "Acme"


@production
def test_a_key_revoked_through_another_process_is_refused_at_once(client, tenant, rt, other):
    key = tenant.issue("editor", ["full"])
    _warm(client, key)
    _, second = other
    resp = second.delete(f"/api/settings/api-keys/{_key_id(second, tenant.key, key)}", headers=auth(tenant.key))
    assert resp.status_code == 200
    resp = client.get("/api/settings", headers=auth(key))
    assert resp.status_code == 401 and resp.json["code"] == "unauthorized"


@production
def test_a_key_revoked_by_the_cli_is_refused_at_once(client, tenant, cs):
    key = tenant.issue("editor", ["full"])
    _warm(client, key)
    code, out, err = cs("keys", "revoke", _key_id(client, tenant.key, key), "--json")
    assert code == 0, err
    assert client.get("/api/settings", headers=auth(key)).status_code == 401


@production
def test_a_members_new_role_and_removal_count_at_once(client, tenant, rt, other):
    from cs_daemon.team.models import Member

    member_id = tenant.add_member("ed@acme.example", "editor")
    key = tenant.issue("admin", ["full"], member_id=member_id)
    _warm(client, key)
    assert client.put("/api/settings/kill-switch", json={"active": True}, headers=auth(key)).status_code == 403
    second_rt, _ = other
    with second_rt.session(tenant.id) as s:
        s.get(Member, member_id).role = "admin"
    assert client.put("/api/settings/kill-switch", json={"active": True}, headers=auth(key)).status_code == 200
    with second_rt.session(tenant.id) as s:
        s.get(Member, member_id).removed_at = rt.now()
    assert client.get("/api/settings", headers=auth(key)).status_code == 401


@production
def test_tenant_settings_changed_elsewhere_show_at_once(client, tenant, rt, other):
    _warm(client, tenant.key)
    _, second = other
    h = auth(tenant.key)
    assert second.put("/api/settings/kill-switch", json={"active": True}, headers=h).status_code == 200
    assert second.patch("/api/settings", json={"name": "Renamed"}, headers=h).status_code == 200
    shown = client.get("/api/settings", headers=h).json["tenant"]
    assert shown["kill_switch_active"] is True and shown["name"] == "Renamed"


@production
def test_a_plan_change_moves_the_rate_limit_at_once(client, tenant, rt, other):
    from cs_daemon.tenants.models import Tenant

    _warm(client, tenant.key)
    before = int(client.get("/api/settings", headers=auth(tenant.key)).headers["X-RateLimit-Limit"])
    second_rt, _ = other
    with second_rt.session(tenant.id) as s:
        s.get(Tenant, tenant.id).plan_tier = "scale"
    after = int(client.get("/api/settings", headers=auth(tenant.key)).headers["X-RateLimit-Limit"])
    assert after > before


@production
def test_a_change_made_behind_the_services_back_is_seen_when_the_entry_expires(client, tenant, rt):
    ticks = [0.0]
    rt.key_memo = KeyMemo(clock=lambda: ticks[0])
    key = tenant.issue("editor", ["full"])
    _warm(client, key)
    conninfo = rt.settings.database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:   # no token is renewed by this
        conn.execute("UPDATE api_keys SET revoked_at = now() WHERE digest IS NOT NULL AND prefix = %s",
                     (key[:12],))
    ticks[0] += memo_mod.TTL_SECONDS - 0.5
    assert client.get("/api/settings", headers=auth(key)).status_code == 200   # within the bound
    ticks[0] += 0.5
    assert client.get("/api/settings", headers=auth(key)).status_code == 401


@production
def test_a_cache_that_lost_its_tokens_makes_every_process_read_again(client, tenant, rt):
    _warm(client, tenant.key)
    r = redis.Redis.from_url(REDIS)
    r.delete(*r.keys(f"{rt.settings.cs_redis_prefix}:keys:*"))
    with Statements(rt) as sql:
        _warm(client, tenant.key, times=3)
    assert sql.key_reads == 1
    assert len(r.keys(f"{rt.settings.cs_redis_prefix}:keys:*")) == 2


@production
def test_the_remembered_tenant_reads_its_tracked_user_count_fresh(tenant, rt):
    from cs_daemon.tenants.models import Tenant

    for _ in range(2):
        with rt.session(atomic=False) as s:
            admit(s, tenant.key, cache=rt.cache, memo=rt.key_memo, now=rt.now())
    conninfo = rt.settings.database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:   # as the ingest's bulk SQL does
        conn.execute("UPDATE tenants SET tracked_users = 41 WHERE id = %s", (tenant.id,))
    with rt.session(atomic=False) as s, Statements(rt) as sql:
        admit(s, tenant.key, cache=rt.cache, memo=rt.key_memo, now=rt.now())
        assert sql.key_reads == 0                              # remembered
        remembered = uow_of(s).tenant
        assert isinstance(remembered, Tenant) and s.get(Tenant, tenant.id) is remembered
        assert remembered.tracked_users == 41


@production
def test_the_remembered_tenant_becomes_a_row_only_where_one_is_needed(tenant, rt):
    from cs_daemon.tenants.models import Tenant

    for _ in range(2):
        with rt.session(atomic=False) as s:
            admit(s, tenant.key, cache=rt.cache, memo=rt.key_memo, now=rt.now())
    with rt.session(atomic=False) as s, Statements(rt) as sql:
        admit(s, tenant.key, cache=rt.cache, memo=rt.key_memo, now=rt.now())
        work = uow_of(s)
        assert work.tenant_made is None and not list(s.identity_map.values())
        assert work.tenant_columns(tenant.id, "id", "name") == (tenant.id, "Acme")   # ingest's way
        assert work.tenant_columns("another-tenant", "name") is None
        found = s.get(Tenant, tenant.id)              # joins the identity map first: no query
        assert found is work.tenant is work.tenant_made
        found.name = "Renamed"
        assert work.tenant_columns(tenant.id, "name") == ("Renamed",)
        assert not [q for q in sql.seen if "tenants" in q]
        s.expunge_all()


@production
def test_a_tenant_row_read_before_the_remembered_one_is_needed_stays_the_row(tenant, rt):
    from sqlalchemy import select

    from cs_daemon.tenants.models import Tenant

    for _ in range(2):
        with rt.session(atomic=False) as s:
            admit(s, tenant.key, cache=rt.cache, memo=rt.key_memo, now=rt.now())
    with rt.session(atomic=False) as s:
        admit(s, tenant.key, cache=rt.cache, memo=rt.key_memo, now=rt.now())
        read = s.scalars(select(Tenant).where(Tenant.id == tenant.id)).one()
        assert uow_of(s).tenant is read


@production
def test_a_handler_changing_the_remembered_tenant_changes_no_other_request(client, tenant, rt):
    from cs_daemon.tenants.models import Tenant

    _warm(client, tenant.key)
    with rt.session(atomic=False) as s:
        admit(s, tenant.key, cache=rt.cache, memo=rt.key_memo, now=rt.now())
        uow_of(s).tenant.config["scribbled"] = True          # never committed
        uow_of(s).tenant.name = "Scribbled"
        s.expunge_all()
    shown = client.get("/api/settings", headers=auth(tenant.key)).json["tenant"]
    assert shown["name"] == "Acme" and "scribbled" not in shown["config"]
    with rt.session(tenant.id) as s:
        assert s.get(Tenant, tenant.id).name == "Acme"


@pytest.mark.parametrize("backend", ["embedded"])
def test_the_embedded_mode_remembers_no_key(client, tenant, rt):
    assert rt.key_memo is None      # a `cs` command beside `cs serve` could not reach its tokens
    with Statements(rt) as sql:
        _warm(client, tenant.key, times=3)
    assert sql.key_reads == 3


# --- refused keys: remembered for a minute, in both modes ----------------------------------


def test_a_flood_of_one_unknown_key_reads_the_database_once(client, tenant, rt):
    stranger = keys.generate()
    with Statements(rt) as sql:
        for _ in range(20):
            resp = client.get("/api/settings", headers=auth(stranger))
            assert resp.status_code == 401 and resp.json["error"] == "unknown API key"
    assert sql.key_reads == 1


def test_a_revoked_key_is_refused_from_memory_after_its_first_refusal(client, tenant, rt):
    key = tenant.issue("editor", ["full"])
    resp = client.delete(f"/api/settings/api-keys/{_key_id(client, tenant.key, key)}", headers=auth(tenant.key))
    assert resp.status_code == 200
    with Statements(rt) as sql:
        for _ in range(10):
            resp = client.get("/api/settings", headers=auth(key))
            assert resp.status_code == 401 and "revoked" in resp.json["error"]
    assert sql.key_reads <= 1           # none when this process saw the key before its revocation


def test_a_key_issued_after_its_refusal_works_at_once(client, tenant, monkeypatch):
    secret = keys.generate()
    assert client.get("/api/settings", headers=auth(secret)).status_code == 401      # remembered as unknown
    monkeypatch.setattr(keys, "generate", lambda test=False: secret)                # the next key minted is it
    resp = client.post("/api/settings/api-keys", headers=auth(tenant.key),
                       json={"label": "late", "role": "viewer", "permissions": ["read"]})
    assert resp.status_code == 201 and resp.json["api_key"] == secret
    assert client.get("/api/settings", headers=auth(secret)).status_code == 200
