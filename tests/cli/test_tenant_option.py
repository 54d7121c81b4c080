"""`--tenant` everywhere: the id or the slug, CS_TENANT as the default, and an unknown
tenant the same one line and exit code on every command; the listing commands a shell
user reaches for (`cs playbooks list`, `cs customers list`, `cs webhooks endpoints`)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import update

from cs_daemon.customers.models import Customer
from cs_daemon.tenants.models import Tenant
from tests.conftest import auth

UNKNOWN_EXIT = 1


def slug_of(rt, tenant) -> str:
    with rt.session() as s:
        return s.get(Tenant, tenant.id).slug


def test_cs_tenant_create_prints_the_slug_and_the_slug_works(cs):
    code, out, _ = cs("tenant", "create", "Acme Rockets", "--owner-email", "o@acme.example")
    assert code == 0 and "(acme-rockets)" in out
    code, out, _ = cs("tenant", "create", "Acme Rockets", "--owner-email", "o@acme2.example", "--json")
    second = json.loads(out)
    assert second["slug"] == "acme-rockets-2"
    code, out, _ = cs("keys", "list", "--tenant", "acme-rockets-2", "--json")
    assert code == 0
    assert [k["prefix"] for k in json.loads(out)["api_keys"]] == [second["api_key"][:12]]
    code, out, _ = cs("interventions", "list", "--tenant", "acme-rockets", "--json")
    assert code == 0 and json.loads(out) == {"interventions": []}


@pytest.mark.parametrize("argv", [
    ["keys", "list"], ["interventions", "list"], ["escalations", "list"], ["team", "list"],
    ["playbooks", "list"], ["customers", "list"], ["webhooks", "endpoints"], ["webhooks", "deliveries"],
    ["actions", "list"], ["analytics"], ["partner", "customers"],
])
def test_slug_and_id_and_cs_tenant_reach_the_same_tenant(cs, rt, tenant, monkeypatch, argv):
    results = []
    for how in ("id", "slug", "env"):
        if how == "env":
            monkeypatch.setenv("CS_TENANT", slug_of(rt, tenant))
            extra = []
        else:
            extra = ["--tenant", tenant.id if how == "id" else slug_of(rt, tenant)]
        code, out, err = cs(*argv, *extra, "--json")
        assert code == 0 or argv == ["partner", "customers"], err
        results.append((code, out))
    assert results[0] == results[1] == results[2]


@pytest.mark.parametrize("argv", [
    ["keys", "list"], ["keys", "issue", "--role", "admin", "--permission", "full"], ["interventions", "list"],
    ["escalations", "list"], ["team", "list"], ["team", "invite", "x@y.example", "--role", "editor"],
    ["playbooks", "list"], ["playbooks", "preview-count", "--conditions", "{}"], ["customers", "list"],
    ["customers", "show", "u1"], ["webhooks", "endpoints"], ["webhooks", "deliveries"],
    ["webhooks", "replay", "--failed"], ["actions", "list"], ["analytics"], ["kill-switch", "on"],
    ["shadow-mode", "off"], ["decide", "dry-run", "u1"], ["partner", "customers"],
])
def test_an_unknown_tenant_is_the_same_error_on_every_command(cs, tenant, argv):
    code, out, err = cs(*argv, "--tenant", "no-such-tenant")
    assert code == UNKNOWN_EXIT, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == ["error: tenant not found: no tenant has the id or slug 'no-such-tenant'; "
                     "`cs tenant list` shows them"]
    assert out == ""
    code, out, _ = cs(*argv, "--tenant", "no-such-tenant", "--json")
    assert code == UNKNOWN_EXIT
    assert json.loads(out)["code"] == "not_found"


def test_an_unknown_cs_tenant_names_where_it_came_from(cs, monkeypatch):
    monkeypatch.setenv("CS_TENANT", "ghost")
    code, _, err = cs("interventions", "list")
    assert code == UNKNOWN_EXIT and "'ghost' (from CS_TENANT)" in err
    assert len(err.strip().splitlines()) == 1


def test_an_explicit_tenant_wins_over_cs_tenant(cs, rt, make_tenant, monkeypatch):
    a, b = make_tenant("Alpha"), make_tenant("Beta")
    monkeypatch.setenv("CS_TENANT", a.id)
    code, out, _ = cs("keys", "list", "--tenant", "beta", "--json")
    assert code == 0
    with rt.session(b.id) as s:
        from cs_daemon.auth.models import ApiKey

        ids = {k.id for k in s.query(ApiKey).all()}
    assert {k["id"] for k in json.loads(out)["api_keys"]} == ids


def test_playbooks_list(cs, tenant, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("- name: Welcome\n  status: active\n  entry_conditions: {trigger: {event: signed_up}}\n"
                    "- name: Later\n  entry_conditions: {field: health, op: lt, value: 40}\n")
    assert cs("playbooks", "apply", str(path), "--tenant", tenant.id)[0] == 0
    code, out, _ = cs("playbooks", "list", "--tenant", tenant.id, "--json")
    listed = json.loads(out)["playbooks"]
    assert code == 0 and [(p["name"], p["status"]) for p in listed] == [("Welcome", "active"), ("Later", "draft")]
    assert listed[0]["entry_conditions"] == {"trigger": {"event": "signed_up"}}
    code, out, _ = cs("playbooks", "list", "--tenant", tenant.id, "--status", "active", "--json")
    assert [p["name"] for p in json.loads(out)["playbooks"]] == ["Welcome"]
    code, out, _ = cs("playbooks", "list", "--tenant", tenant.id)
    assert code == 0 and "Welcome" in out and "Later" in out
    code, _, err = cs("playbooks", "list", "--tenant", tenant.id, "--status", "sleeping")
    assert code == 2 and "--status" in err


def test_customers_list_with_filters(cs, rt, tenant, client):
    resp = client.post("/api/track", headers=auth(tenant.key), json={"events": [
        {"user_id": "a", "event": "$identify", "properties": {"plan": "pro", "email": "a@x.example"}},
        {"user_id": "b", "event": "$identify", "properties": {"plan": "free"}},
        {"user_id": "c", "event": "$identify", "properties": {"plan": "pro"}}]})
    assert resp.status_code == 200
    with rt.session(tenant.id) as s:
        s.execute(update(Customer).where(Customer.tenant_id == tenant.id, Customer.id == "c")
                  .values(lifecycle_stage="at_risk", risk_level="high"))

    def ids(*argv):
        code, out, err = cs("customers", "list", "--tenant", tenant.id, *argv, "--json")
        assert code == 0, err
        return sorted(c["id"] for c in json.loads(out)["customers"])

    assert ids() == ["a", "b", "c"]
    assert ids("--stage", "at_risk") == ["c"]
    assert ids("--risk", "high") == ["c"]
    assert ids("--trait", "plan", "--value", "pro") == ["a", "c"]
    assert ids("--trait", "plan", "--value", "pro", "--stage", "at_risk") == ["c"]
    assert ids("--search", "a@x.example") == ["a"]
    code, out, _ = cs("customers", "list", "--tenant", tenant.id, "--limit", "2", "--json")
    first = json.loads(out)
    assert len(first["customers"]) == 2 and first["next_cursor"]
    code, out, _ = cs("customers", "list", "--tenant", tenant.id, "--limit", "2", "--cursor", first["next_cursor"],
                      "--json")
    assert len(json.loads(out)["customers"]) == 1
    code, _, err = cs("customers", "list", "--tenant", tenant.id, "--risk", "extreme")
    assert code == 2 and "--risk" in err


def test_webhooks_endpoints(cs, make_tenant, client, monkeypatch):
    monkeypatch.setenv("ALLOW_PRIVATE_WEBHOOK_URLS", "1")
    growth = make_tenant("Hooks", plan_tier="growth")
    made = client.post("/api/webhooks/endpoints", headers=auth(growth.key),
                       json={"url": "https://hooks.example/in", "events": ["user.risk_changed"],
                             "description": "crm"}).json["endpoint"]
    code, out, _ = cs("webhooks", "endpoints", "--tenant", "hooks", "--json")
    assert code == 0
    listed = json.loads(out)["endpoints"]
    assert [(e["id"], e["url"], e["subscribed_events"]) for e in listed] == \
        [(made["id"], "https://hooks.example/in", ["user.risk_changed"])]
    assert made["secret"] not in out and "secret" not in listed[0]
    code, out, _ = cs("webhooks", "endpoints", "--tenant", "hooks")
    assert code == 0 and "hooks.example" in out
