"""The tenant's config is typed (docs/tenant-config.md): every write is checked, stored
values that do not validate fall back to their defaults, and the CRM secret is
write-only, encrypted at rest and never shown."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from sqlalchemy import select, update

from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery, DeliveryAttempt
from cs_daemon.runtime import Runtime
from cs_daemon.tenants import config as tenant_config
from cs_daemon.tenants.models import Tenant
from tests.conftest import auth

BAD = [
    ({"churned_after_days": "x"}, "config.churned_after_days"),
    ({"churned_after_days": 0}, "config.churned_after_days"),
    ({"dormant_after_days": 1e6}, "config.dormant_after_days"),
    ({"engagement_half_life_days": 0}, "config.engagement_half_life_days"),
    ({"engagement_saturation": -1}, "config.engagement_saturation"),
    ({"new_for_hours": True}, "config.new_for_hours"),
    ({"shadow_mode_expires_at": "not a date"}, "config.shadow_mode_expires_at"),
    ({"shadow_mode_expires_at": "2026-11-02T09:30:00"}, "config.shadow_mode_expires_at"),   # no offset
    ({"milestones": "created_project"}, "config.milestones"),
    ({"milestones": ["created_project", 5]}, "config.milestones[1]"),
    ({"milestones": ["x"] * 101}, "config.milestones"),
    ({"churn_events": [""]}, "config.churn_events[0]"),
    ({"health_weights": {"activation": -1}}, "config.health_weights.activation"),
    ({"health_weights": {"activaton": 1}}, "config.health_weights.activaton"),
    ({"health_weights": [1, 2, 3]}, "config.health_weights"),
    ({"risk_thresholds": {"high": "40"}}, "config.risk_thresholds.high"),
    ({"risk_trend_drop": 101}, "config.risk_trend_drop"),
    ({"engaged_min_engagement": "60"}, "config.engaged_min_engagement"),
    ({"auto_approve_min_confidence": 1.5}, "config.auto_approve_min_confidence"),
    ({"approvalMode": "yolo"}, "config.approvalMode"),
    ({"onboardingCompleted": "yes"}, "config.onboardingCompleted"),
    ({"trace_retention_days": 0}, "config.trace_retention_days"),
    ({"trace_retention_days": "30"}, "config.trace_retention_days"),
    ({"crm_webhook_url": "ftp://crm.example/hook", "crm_webhook_secret": "s"}, "config.crm_webhook_url"),
    ({"crm_webhook_url": 42, "crm_webhook_secret": "s"}, "config.crm_webhook_url"),
    ({"crm_webhook_url": "https://crm.example/hook", "crm_webhook_secret": ""}, "config.crm_webhook_secret"),
]


@pytest.mark.parametrize("config, field", BAD, ids=[f for _, f in BAD])
def test_a_wrong_type_or_range_is_refused_naming_the_field_and_nothing_is_stored(client, tenant, config, field):
    h = auth(tenant.key)
    before = client.get("/api/settings", headers=h).json["tenant"]
    resp = client.patch("/api/settings", headers=h, json={"name": "Renamed", "config": {"y": 1, **config}})
    assert resp.status_code == 400, resp.json
    assert resp.json["code"] == "validation_failed"
    assert field in [d["field"] for d in resp.json["details"]], resp.json["details"]
    assert client.get("/api/settings", headers=h).json["tenant"] == before


def test_every_known_key_takes_its_documented_values(client, tenant, rt):
    config = {
        "approvalMode": "semi_auto", "auto_approve_min_confidence": 0.7, "onboardingCompleted": True,
        "milestones": ["created_project", "invited_teammate"], "expansion_events": ["seat_added"],
        "churn_events": ["account_closed"], "health_weights": {"activation": 1, "engagement": 2.5},
        "engagement_half_life_days": 3.5, "engagement_saturation": 20, "new_for_hours": 0, "onboarding_days": 7,
        "engaged_min_engagement": 55, "dormant_after_days": 10, "churned_after_days": 3650,
        "risk_thresholds": {"medium": 50, "high": 30, "critical": 10}, "risk_trend_drop": 0,
        "trace_retention_days": 7,
        "custom_key": {"anything": ["goes"]},
    }
    resp = client.patch("/api/settings", headers=auth(tenant.key), json={"config": config})
    assert resp.status_code == 200, resp.json
    assert resp.json["config"] == {**config, "crm_webhook_secret_set": False}
    with rt.session() as s:
        assert s.get(Tenant, tenant.id).config == config         # stored as sent: no coercion


def test_a_stored_bad_value_is_named_when_another_key_is_written(client, tenant, rt):
    with rt.session() as s:
        s.execute(update(Tenant).where(Tenant.id == tenant.id).values(config={"churned_after_days": "x"}))
    h = auth(tenant.key)
    resp = client.patch("/api/settings", headers=h, json={"config": {"milestones": ["a"]}})
    assert resp.status_code == 400
    assert [d["field"] for d in resp.json["details"]] == ["config.churned_after_days"]
    resp = client.patch("/api/settings", headers=h, json={"config": {"milestones": ["a"], "churned_after_days": None}})
    assert resp.status_code == 200 and resp.json["config"]["milestones"] == ["a"]


def test_the_reader_drops_invalid_stored_values_so_their_defaults_apply():
    stored = {"churned_after_days": "x", "dormant_after_days": 20, "approvalMode": "yolo",
              "auto_approve_min_confidence": 0.5, "health_weights": {"activation": "a lot"},
              "shadow_mode_expires_at": "soon", "milestones": 7, "unknown": 1}
    typed = tenant_config.read(stored)
    assert typed.scoring() == {"dormant_after_days": 20}
    assert typed.approval_mode == "suggest_only" and typed.auto_approve_threshold == 0.5
    assert typed.shadow_mode_expires is None
    assert {p["field"] for p in tenant_config.problems(stored)} == {
        "config.churned_after_days", "config.approvalMode", "config.health_weights.activation",
        "config.shadow_mode_expires_at", "config.milestones"}
    assert tenant_config.read("not an object").scoring() == {}
    assert tenant_config.problems(["x"]) == [{"field": "config", "message": "must be an object"}]


def test_a_stored_bad_value_never_stops_ingest_and_scores_with_the_default(client, tenant, rt, clock):
    with rt.session() as s:
        s.execute(update(Tenant).where(Tenant.id == tenant.id).values(
            config={"churned_after_days": "x", "milestones": 5, "engagement_half_life_days": 0,
                    "shadow_mode_expires_at": "soon"}))
    h = auth(tenant.key)
    resp = client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "viewed"}]})
    assert resp.status_code == 200 and resp.json["accepted"] == 1
    clock.advance(days=31)
    from cs_daemon.customers import service as customers

    with rt.session(tenant.id) as s:
        assert customers.sweep(s, now=clock.now()) == 1
    detail = client.get("/api/customers/u1", headers=h)
    assert detail.status_code == 200
    assert detail.json["customer"]["lifecycle_stage"] == "churned"       # the default 30 days


# -- the CRM secret --------------------------------------------------------------------

def _tenant_row(rt, tenant_id) -> Tenant:
    with rt.session() as s:
        return s.get(Tenant, tenant_id)


def test_the_crm_secret_is_stored_encrypted_and_never_shown(client, tenant, rt, receiver):
    h = auth(tenant.key)
    secret = "crm-secret-4b1d"
    resp = client.patch("/api/settings", headers=h, json={"config": {"crm_webhook_url": receiver.url,
                                                                      "crm_webhook_secret": secret}})
    assert resp.status_code == 200
    assert resp.json["config"]["crm_webhook_secret_set"] is True and secret not in json.dumps(resp.json)
    shown = client.get("/api/settings", headers=h)
    assert shown.json["tenant"]["config"] == {"crm_webhook_url": receiver.url, "crm_webhook_secret_set": True}
    assert secret not in shown.get_data(as_text=True)
    row = _tenant_row(rt, tenant.id)
    assert "crm_webhook_secret" not in row.config and secret not in json.dumps(row.config)
    assert row.crm_webhook_secret_enc and secret not in row.crm_webhook_secret_enc
    # a shown-only key sent back is not stored
    client.patch("/api/settings", headers=h, json={"config": {"crm_webhook_secret_set": False, "y": 1}})
    assert "crm_webhook_secret_set" not in _tenant_row(rt, tenant.id).config
    assert client.get("/api/settings", headers=h).json["tenant"]["config"]["crm_webhook_secret_set"] is True


def test_the_crm_channel_signs_with_the_decrypted_secret(client, make_tenant, rt, receiver):
    tenant = make_tenant("Crm", plan_tier="growth")
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "viewed"}]})
    pid = client.post("/api/playbooks", headers=h, json={"name": "p"}).json["id"]
    client.patch("/api/settings", headers=h, json={"config": {"crm_webhook_url": receiver.url,
                                                              "crm_webhook_secret": "s3cret"}})
    iv = client.post("/api/interventions", headers=h, json={"user_id": "u1", "playbook_id": pid, "channel": "crm",
                                                            "message_body": "hi"}).json["id"]
    assert client.put(f"/api/interventions/{iv}/approve", headers=h).status_code == 200
    _run_deliveries(rt, tenant.id)
    [req] = receiver.requests
    assert req.headers["X-Service-Signature"] == hmac.new(b"s3cret", req.body, hashlib.sha256).hexdigest()


def test_the_crm_secret_cannot_be_removed_while_the_url_is_set(client, tenant, receiver):
    h = auth(tenant.key)
    client.patch("/api/settings", headers=h, json={"config": {"crm_webhook_url": receiver.url,
                                                              "crm_webhook_secret": "s"}})
    resp = client.patch("/api/settings", headers=h, json={"config": {"crm_webhook_secret": None}})
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "config.crm_webhook_secret"
    resp = client.patch("/api/settings", headers=h, json={"config": {"crm_webhook_secret": None,
                                                                     "crm_webhook_url": None}})
    assert resp.status_code == 200 and resp.json["config"] == {"crm_webhook_secret_set": False}
    resp = client.patch("/api/settings", headers=h, json={"config": {"crm_webhook_url": receiver.url}})
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "config.crm_webhook_secret"


@pytest.fixture
def strict(backend, tmp_path, request, sqlite_template, clock):
    """An app that allows no private URLs (the production default)."""
    from tests.conftest import clean, make_settings
    from webapp import create_app

    pg = request.getfixturevalue("pg_url") if backend == "postgres" else None
    settings = make_settings(backend, tmp_path, pg, sqlite_template, allow_private_webhook_urls=False)
    clean(settings)
    rt = Runtime(settings, clock)
    from cs_daemon.tenants import service as tenants

    with rt.session() as s:
        made = tenants.create(s, name="Strict", owner_email="o@s.example", now=rt.now())
    yield create_app(runtime=rt).test_client(), made.key.secret
    clean(settings)


@pytest.mark.parametrize("url, says", [
    ("http://crm.example.com/hook", "https"),                 # http only where private URLs are allowed
    ("https://127.0.0.1/hook", "non-public"),
    ("https://10.1.2.3/hook", "non-public"),
    ("https://169.254.169.254/latest", "non-public"),
    ("https://[::1]/hook", "non-public"),
    ("https://user:pw@crm.example.com/hook", "credentials"),
])
def test_the_crm_url_passes_the_webhook_url_policy_at_write_time(strict, url, says):
    client, key = strict
    resp = client.patch("/api/settings", headers=auth(key), json={"config": {"crm_webhook_url": url,
                                                                             "crm_webhook_secret": "s"}})
    assert resp.status_code == 400, resp.json
    [detail] = resp.json["details"]
    assert detail["field"] == "config.crm_webhook_url" and says in detail["message"]
    assert client.get("/api/settings", headers=auth(key)).json["tenant"]["config"] == {"crm_webhook_secret_set": False}


def test_the_crm_url_passes_the_webhook_url_policy_at_send_time(client, make_tenant, rt, settings, clock, receiver):
    tenant = make_tenant("Crm", plan_tier="growth")
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "viewed"}]})
    pid = client.post("/api/playbooks", headers=h, json={"name": "p"}).json["id"]
    client.patch("/api/settings", headers=h, json={"config": {"crm_webhook_url": receiver.url,
                                                              "crm_webhook_secret": "s"}})   # allowed then
    iv = client.post("/api/interventions", headers=h, json={"user_id": "u1", "playbook_id": pid, "channel": "crm",
                                                            "message_body": "hi"}).json["id"]
    client.put(f"/api/interventions/{iv}/approve", headers=h)
    strict_rt = Runtime(settings.model_copy(update={"allow_private_webhook_urls": False}), clock)
    _run_deliveries(strict_rt, tenant.id)                      # the policy changed since
    with rt.session(tenant.id) as s:
        [attempt] = s.scalars(select(DeliveryAttempt)).all()
    assert attempt.error.startswith("refused:") and receiver.requests == []


def _run_deliveries(rt, tenant_id):
    with rt.session(tenant_id) as s:
        ids = [d.id for d in s.scalars(select(Delivery).where(Delivery.status.in_(("pending", "retrying"))))]
    for delivery_id in ids:
        delivery.attempt(rt, delivery_id)


@pytest.fixture
def empty_db(backend, tmp_path):
    """Settings of an empty database (no migration run yet) of this backend."""
    import uuid

    import psycopg

    from cs_daemon.config import Settings
    from cs_daemon.db import get_engine
    from tests.conftest import PG, _pg_conninfo

    if backend == "embedded":
        yield Settings(cs_data_dir=tmp_path, database_url=None, redis_url=None, cs_secret_key="migration-key")
        return
    name = f"cs_test_mig_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    settings = Settings(database_url=f"{PG}/{name}", redis_url=None, cs_secret_key="migration-key")
    yield settings
    get_engine(settings).dispose()
    with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.filterwarnings("ignore:Skipped unsupported reflection of expression-based index")
def test_migration_0017_encrypts_crm_secrets_stored_in_the_config(empty_db):
    from sqlalchemy import text

    from cs_daemon import crypto, migrate
    from cs_daemon.db import get_engine

    migrate.upgrade(empty_db, "0016")
    engine = get_engine(empty_db)
    with engine.begin() as conn:
        for tid, config in (("t-crm", {"crm_webhook_url": "https://crm.example/h", "crm_webhook_secret": "old-plain",
                                       "milestones": ["a"]}),
                            ("t-none", {"milestones": ["b"]})):
            conn.execute(text("INSERT INTO tenants (id, name, slug, config, plan_tier, plan_status, tracked_users, "
                              "kill_switch_active, shadow_mode, partner, created_at) VALUES (:id, :id, :id, :config, "
                              "'trial', 'trialing', 0, false, false, false, '2026-11-01 00:00:00')"),
                         {"id": tid, "config": json.dumps(config)})
    migrate.upgrade(empty_db)
    with engine.connect() as conn:
        rows = {r.id: r for r in conn.execute(text("SELECT id, config, crm_webhook_secret_enc FROM tenants"))}
    config = rows["t-crm"].config if isinstance(rows["t-crm"].config, dict) else json.loads(rows["t-crm"].config)
    assert config == {"crm_webhook_url": "https://crm.example/h", "milestones": ["a"]}
    assert crypto.decrypt("migration-key", rows["t-crm"].crm_webhook_secret_enc) == "old-plain"
    assert rows["t-none"].crm_webhook_secret_enc is None
    migrate.upgrade(empty_db, "0017")
    from alembic import command

    command.downgrade(migrate.alembic_config(empty_db), "0016")      # and back: the secret returns to the config
    with engine.connect() as conn:
        back = conn.execute(text("SELECT config FROM tenants WHERE id = 't-crm'")).scalar_one()
    assert (back if isinstance(back, dict) else json.loads(back))["crm_webhook_secret"] == "old-plain"
