"""Settings endpoints (docs/api.md, "Settings")."""

from __future__ import annotations

import pytest

from tests.conftest import auth


def test_get_settings_shape(client, tenant):
    resp = client.get("/api/settings", headers=auth(tenant.key))
    assert resp.status_code == 200
    body = resp.json
    assert set(body) == {"tenant", "brand_context", "api_keys"}
    t = body["tenant"]
    assert {"id", "name", "slug", "config", "plan_tier", "plan_status", "tracked_user_limit",
            "kill_switch_active", "shadow_mode", "created_at"} <= set(t)
    assert t["plan_tier"] == "trial" and t["plan_status"] == "trialing"
    assert t["tracked_user_limit"] == 1000
    assert t["kill_switch_active"] is False and t["shadow_mode"] is False
    assert body["brand_context"] is None


def test_patch_settings_merges_config(client, tenant):
    h = auth(tenant.key)
    resp = client.patch("/api/settings", headers=h, json={
        "name": "Acme Inc", "config": {"milestones": ["created_project"], "x": 1},
        "approvalMode": "semi_auto", "onboardingCompleted": True, "unknown_field": "ignored"})
    assert resp.status_code == 200
    assert resp.json["name"] == "Acme Inc"
    cfg = resp.json["config"]
    assert cfg["milestones"] == ["created_project"] and cfg["approvalMode"] == "semi_auto"
    assert cfg["onboardingCompleted"] is True and "unknown_field" not in cfg
    resp = client.patch("/api/settings", headers=h, json={"config": {"x": None, "y": 2}})
    assert resp.json["config"] == {"milestones": ["created_project"], "approvalMode": "semi_auto",
                                   "onboardingCompleted": True, "y": 2, "crm_webhook_secret_set": False}
    stored = client.get("/api/settings", headers=h).json["tenant"]
    assert stored["name"] == "Acme Inc" and stored["config"]["y"] == 2


@pytest.mark.parametrize("payload, field", [
    ({"name": ""}, "name"),
    ({"approvalMode": "yolo"}, "approvalMode"),
    ({"config": "not an object"}, "config"),
    ({"onboardingCompleted": "maybe"}, "onboardingCompleted"),
    ({"onboardingCompleted": "yes"}, "onboardingCompleted"),
    ({"onboardingCompleted": 1}, "onboardingCompleted"),
    ({"config": {"crm_webhook_url": "https://crm.example/hook"}}, "config.crm_webhook_secret"),
])
def test_patch_settings_rejects_bad_input_and_changes_nothing(client, tenant, payload, field):
    h = auth(tenant.key)
    before = client.get("/api/settings", headers=h).json["tenant"]
    resp = client.patch("/api/settings", headers=h, json=payload)
    assert resp.status_code == 400
    assert resp.json["code"] == "validation_failed"
    assert field in [d["field"] for d in resp.json["details"]]
    assert client.get("/api/settings", headers=h).json["tenant"] == before


def test_brand_upsert(client, tenant):
    h = auth(tenant.key)
    resp = client.patch("/api/settings/brand", headers=h, json={
        "product_description": "Invoicing for plumbers", "things_to_avoid": ["cheap"]})
    assert resp.status_code == 200 and resp.json == {"updated": True}
    resp = client.patch("/api/settings/brand", headers=h, json={"tone_guidelines": "warm"})
    brand = client.get("/api/settings", headers=h).json["brand_context"]
    assert brand == {"product_description": "Invoicing for plumbers", "tone_guidelines": "warm",
                     "things_to_mention": None, "things_to_avoid": ["cheap"]}
    resp = client.patch("/api/settings/brand", headers=h, json={"things_to_mention": "not a list"})
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "things_to_mention"


@pytest.mark.parametrize("path, field", [("/api/settings/kill-switch", "kill_switch_active"),
                                         ("/api/settings/shadow-mode", "shadow_mode")])
def test_flags_work_for_admin_and_are_refused_to_editor(client, tenant, path, field):
    editor = tenant.issue("editor", ["full"])
    resp = client.put(path, json={"active": True}, headers=auth(editor))
    assert resp.status_code == 403 and resp.json["code"] == "forbidden"
    resp = client.put(path, json={"active": True}, headers=auth(tenant.key))
    assert resp.status_code == 200 and resp.json[field] is True
    assert client.get("/api/settings", headers=auth(tenant.key)).json["tenant"][field] is True
    resp = client.put(path, json={"active": False}, headers=auth(tenant.key))
    assert resp.status_code == 200 and resp.json[field] is False
    resp = client.put(path, json={}, headers=auth(tenant.key))
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "active"


@pytest.mark.parametrize("path, field", [("/api/settings/kill-switch", "kill_switch_active"),
                                         ("/api/settings/shadow-mode", "shadow_mode")])
@pytest.mark.parametrize("value", ["yes", "true", 1, 0, None])
def test_flags_take_only_a_json_boolean(client, tenant, path, field, value):
    # `active` is a boolean: a string or a number is a 400, and the flag stays off
    h = auth(tenant.key)
    resp = client.put(path, json={"active": value}, headers=h)
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed"
    assert resp.json["details"][0]["field"] == "active"
    assert client.get("/api/settings", headers=h).json["tenant"][field] is False


def test_new_key_test_flag_takes_only_a_json_boolean(client, tenant):
    h = auth(tenant.key)
    resp = client.post("/api/settings/api-keys", headers=h,
                       json={"label": "x", "role": "viewer", "permissions": ["read"], "test": "yes"})
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "test"
    assert len(client.get("/api/settings", headers=h).json["api_keys"]) == 1


def test_editor_may_change_settings_and_brand(client, tenant):
    editor = tenant.issue("editor", ["full"])
    assert client.patch("/api/settings", json={"name": "N"}, headers=auth(editor)).status_code == 200
    assert client.patch("/api/settings/brand", json={"tone_guidelines": "t"},
                        headers=auth(editor)).status_code == 200


def test_shadow_mode_turns_itself_off_after_72_hours(client, tenant, clock):
    h = auth(tenant.key)
    resp = client.put("/api/settings/shadow-mode", json={"active": True}, headers=h)
    assert resp.json["shadow_mode"] is True
    assert resp.json["shadow_mode_expires_at"].startswith("2026-11-05T09:30")
    clock.advance(hours=71, minutes=59)
    assert client.get("/api/settings", headers=h).json["tenant"]["shadow_mode"] is True
    clock.advance(minutes=1)
    tenant_body = client.get("/api/settings", headers=h).json["tenant"]
    assert tenant_body["shadow_mode"] is False
    assert "shadow_mode_expires_at" not in tenant_body["config"]


def test_shadow_mode_end_is_not_changed_through_settings_patch(client, tenant, clock):
    """Shadow mode is admin only and ends 72 hours after it was turned on: an editor's
    PATCH of its end (later, or past, which would switch it off) changes nothing."""
    h, editor = auth(tenant.key), auth(tenant.issue("editor", ["full"]))
    client.put("/api/settings/shadow-mode", json={"active": True}, headers=h)
    on = client.get("/api/settings", headers=h).json["tenant"]["config"]["shadow_mode_expires_at"]
    for who in (editor, h):
        for end in ("2099-01-01T00:00:00+00:00", "2020-01-01T00:00:00+00:00", None):
            resp = client.patch("/api/settings", headers=who, json={"config": {"shadow_mode_expires_at": end}})
            assert resp.status_code == 400 and resp.json["details"][0]["field"] == "config.shadow_mode_expires_at"
    config = client.get("/api/settings", headers=h).json["tenant"]["config"]
    assert client.patch("/api/settings", headers=editor, json={"config": config}).status_code == 200   # sent back as read
    tenant_body = client.get("/api/settings", headers=h).json["tenant"]
    assert tenant_body["shadow_mode"] is True and tenant_body["config"]["shadow_mode_expires_at"] == on
    clock.advance(hours=72)
    assert client.get("/api/settings", headers=h).json["tenant"]["shadow_mode"] is False


def test_turning_shadow_mode_on_again_restarts_the_72_hours(client, tenant, clock):
    h = auth(tenant.key)
    client.put("/api/settings/shadow-mode", json={"active": True}, headers=h)
    clock.advance(hours=70)
    client.put("/api/settings/shadow-mode", json={"active": True}, headers=h)
    clock.advance(hours=70)
    assert client.get("/api/settings", headers=h).json["tenant"]["shadow_mode"] is True


def test_scale_tenants_track_unlimited_users(client, make_tenant):
    scale = make_tenant("Huge", plan_tier="scale")
    assert client.get("/api/settings", headers=auth(scale.key)).json["tenant"]["tracked_user_limit"] is None


def test_concurrent_settings_changes_each_keep_theirs(app, client, make_tenant):
    """Real concurrent requests to a real server: PATCHes read the config unlocked and
    wrote it whole, so most keys were lost, and shadow mode came out on without its end
    (it would never switch itself off)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import requests

    from tests.support.sse import AppServer

    tenant = make_tenant("Racing", plan_tier="growth")
    h = auth(tenant.key)
    names = [f"m{i}" for i in range(6)]
    server = AppServer(app)
    start = threading.Barrier(len(names) + 5)

    def send(what):
        start.wait()
        if what == "shadow":
            return requests.put(f"{server.url}/api/settings/shadow-mode", headers=h, json={"active": True}, timeout=30)
        if what.startswith("brand"):
            return requests.patch(f"{server.url}/api/settings/brand", headers=h, timeout=30,
                                  json={"product_description" if what == "brand0" else "tone_guidelines": what})
        return requests.patch(f"{server.url}/api/settings", headers=h, json={"config": {what: 1}}, timeout=30)

    try:
        with ThreadPoolExecutor(len(names) + 5) as pool:
            answers = list(pool.map(send, [*names, "shadow", "brand0", "brand1", "m6", "m7"]))
    finally:
        server.close()
    assert {r.status_code for r in answers} == {200}, [r.text for r in answers]
    found = client.get("/api/settings", headers=h).json
    config = found["tenant"]["config"]
    assert {n for n in [*names, "m6", "m7"] if config.get(n) == 1} == {*names, "m6", "m7"}, config
    assert found["tenant"]["shadow_mode"] is True and config.get("shadow_mode_expires_at"), config
    assert found["brand_context"]["product_description"] == "brand0"
    assert found["brand_context"]["tone_guidelines"] == "brand1"
