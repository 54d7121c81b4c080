"""The `cs` contract scripts rely on: --json is one JSON document on stdout, bad input is
one line on stderr and a non-zero exit, and every command acts on the data the daemon
serves (same settings, same database)."""

from __future__ import annotations

import json

import pytest

from cs_cli.main import run
from tests.conftest import auth


def _json(out: str):
    return json.loads(out)  # fails unless stdout is exactly one JSON document


def test_tenant_create_json_and_the_key_works_on_the_api(cs, client):
    code, out, _ = cs("tenant", "create", "Initech", "--owner-email", "bill@initech.example", "--json")
    assert code == 0
    body = _json(out)
    assert set(body) == {"tenant_id", "slug", "api_key", "member_id"} and body["slug"] == "initech"
    assert body["api_key"].startswith("rt_live_")
    resp = client.get("/api/settings", headers=auth(body["api_key"]))
    assert resp.status_code == 200
    assert resp.json["tenant"]["id"] == body["tenant_id"]
    assert resp.json["tenant"]["name"] == "Initech"
    # the owner key is an admin `full` key: admin-only endpoints accept it
    assert client.put("/api/settings/kill-switch", json={"active": True},
                      headers=auth(body["api_key"])).status_code == 200


def test_tenant_create_with_plan(cs, client):
    code, out, _ = cs("tenant", "create", "Hooli", "--owner-email", "g@hooli.example", "--plan", "growth", "--json")
    key = _json(out)["api_key"]
    tenant = client.get("/api/settings", headers=auth(key)).json["tenant"]
    assert tenant["plan_tier"] == "growth" and tenant["tracked_user_limit"] == 100000


@pytest.mark.parametrize("argv, words", [
    (["tenant", "create", "X", "--owner-email", "not-an-email"], "email"),
    (["tenant", "create", "X", "--owner-email", "a@b.co", "--plan", "gold"], "--plan"),
    (["tenant", "create", "X"], "--owner-email"),
    (["keys", "issue", "--tenant", "nope", "--role", "admin", "--permission", "full"], "tenant not found"),
    (["kill-switch", "maybe", "--tenant", "{tenant}"], "maybe"),
    (["kill-switch", "--tenant", "{tenant}"], "on, off"),                 # click's list on one line
    (["no-such-command"], "no-such-command"),
    (["tenant", "create", "X", "--owner-email", "@"], "email"),
    (["tenant", "create", "X", "--owner-email", "a" * 320 + "@b.co"], "email"),
    (["tenant", "create", "x" * 201, "--owner-email", "a@b.co"], "200 characters"),
    (["team", "invite", "@", "--tenant", "{tenant}"], "email"),
    (["keys", "issue", "--tenant", "{tenant}", "--role", "admin", "--permission", "full", "--label", "l" * 201],
     "200 characters"),
    (["decide", "evaluate", "--tenant", "{tenant}", "--since", "999999999999d"], "3650d"),
    (["decide", "evaluate", "--tenant", "{tenant}", "--since", "1000000d"], "3650d"),
    (["decide", "evaluate", "--tenant", "{tenant}", "--since", "0001-01-01T00:00:00+05:00"], "3650d"),
    (["status", "--queue-age", "99999999999999999999999"], "queue-age"),
    (["playbooks", "apply", "{latin1}", "--tenant", "{tenant}"], "cannot parse"),
    (["playbooks", "apply", "{deep}", "--tenant", "{tenant}"], "deeper than 100 levels"),
    (["playbooks", "preview-count", "--tenant", "{tenant}", "--conditions", "{deep}"], "deeper than 100 levels"),
    (["serve", "--host", ""], "--host"),
])
def test_bad_input_is_one_clear_line_and_non_zero(cs, tenant, argv, words, tmp_path):
    latin1, deep = tmp_path / "latin1.yaml", tmp_path / "deep.json"
    latin1.write_bytes("- name: Caf\u00e9\n".encode("latin-1"))
    deep.write_text("[" * 3000 + "]" * 3000)
    code, out, err = cs(*(a.format(tenant=tenant.id, latin1=latin1, deep=deep) for a in argv))
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and words in lines[0]
    assert "Traceback" not in err


def test_revoking_a_revoked_key_says_so(cs, tenant, clock):
    code, out, _ = cs("keys", "issue", "--tenant", tenant.id, "--role", "viewer", "--permission", "read", "--json")
    key_id = _json(out)["id"]
    code, out, _ = cs("keys", "revoke", key_id)
    assert code == 0 and "already" not in out
    clock.advance(minutes=1)
    code, out, _ = cs("keys", "revoke", key_id)
    assert code == 0 and "already revoked" in out


def test_bad_input_with_json_prints_one_json_error(cs):
    code, out, err = cs("keys", "list", "--tenant", "missing", "--json")
    assert code == 1
    assert _json(out) == {"error": "tenant not found: no tenant has the id or slug 'missing'; "
                          "`cs tenant list` shows them", "code": "not_found"}


def test_keys_issue_list_revoke(cs, tenant, client):
    code, out, _ = cs("keys", "issue", "--tenant", tenant.id, "--role", "viewer",
                      "--permission", "read", "--permission", "decide", "--test", "--label", "dash", "--json")
    assert code == 0
    issued = _json(out)
    assert set(issued) == {"id", "api_key", "prefix"}
    assert issued["api_key"].startswith("rt_test_") and issued["prefix"] == issued["api_key"][:12]
    assert client.get("/api/settings", headers=auth(issued["api_key"])).status_code == 200
    assert client.patch("/api/settings", json={"name": "x"},
                        headers=auth(issued["api_key"])).status_code == 403

    code, out, _ = cs("keys", "list", "--tenant", tenant.id, "--json")
    listed = _json(out)["api_keys"]
    mine = [k for k in listed if k["id"] == issued["id"]][0]
    assert mine["permissions"] == ["decide", "read"] and mine["test"] is True and mine["label"] == "dash"
    assert issued["api_key"] not in out

    code, out, _ = cs("keys", "list", "--tenant", tenant.id)
    assert code == 0 and issued["prefix"] in out

    code, out, _ = cs("keys", "revoke", issued["id"], "--json")
    assert code == 0 and _json(out)["revoked"] is True
    assert client.get("/api/settings", headers=auth(issued["api_key"])).status_code == 401
    code, _, err = cs("keys", "revoke", "no-such-key")
    assert code == 1 and "no API key" in err


def test_keys_list_shows_who_minted_each_key(cs, tenant, client):
    minted = client.post("/api/settings/api-keys", headers=auth(tenant.key), json={"role": "viewer"}).json
    code, out, _ = cs("keys", "list", "--tenant", tenant.id, "--json")
    by_id = {k["id"]: k for k in _json(out)["api_keys"]}
    assert code == 0 and by_id[minted["id"]]["created_by"] == tenant.member_id
    assert by_id[tenant.key_id]["created_by"] is None
    code, out, _ = cs("keys", "list", "--tenant", tenant.id)
    assert code == 0 and "created by" in out and tenant.member_id[:8] in out


def test_kill_switch_and_shadow_mode(cs, tenant, client):
    code, out, _ = cs("kill-switch", "on", "--tenant", tenant.id, "--json")
    assert code == 0 and _json(out)["kill_switch_active"] is True
    assert client.get("/api/settings", headers=auth(tenant.key)).json["tenant"]["kill_switch_active"] is True
    code, out, _ = cs("kill-switch", "off", "--tenant", tenant.id)
    assert code == 0 and "off" in out
    code, out, _ = cs("shadow-mode", "on", "--tenant", tenant.id, "--json")
    body = _json(out)
    assert body["shadow_mode"] is True and body["shadow_mode_expires_at"]
    assert client.get("/api/settings", headers=auth(tenant.key)).json["tenant"]["shadow_mode"] is True
    code, out, _ = cs("shadow-mode", "off", "--tenant", tenant.id, "--json")
    assert _json(out)["shadow_mode"] is False


def test_tenant_list_and_db_upgrade(cs, tenant):
    code, out, _ = cs("tenant", "list", "--json")
    assert code == 0 and [t["id"] for t in _json(out)["tenants"]] == [tenant.id]
    slug = _json(out)["tenants"][0]["slug"]
    code, out, _ = cs("tenant", "list")
    assert code == 0 and slug in out     # the table shows what --tenant takes besides the id
    code, out, _ = cs("db", "upgrade", "--json")
    assert code == 0 and _json(out)["upgraded"] is True


def test_bad_setting_stops_with_one_line_naming_it(cs, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "mysql://nope")
    code, _, err = cs("tenant", "list")
    assert code == 2
    assert err.strip().startswith("error: DATABASE_URL:")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", [[], ["--json"]])
def test_a_data_folder_that_cannot_be_made_is_a_bad_setting(cs, monkeypatch, flag):
    """/proc lets no one make a folder, root included (whom the access check lets by)."""
    monkeypatch.setenv("CS_DATA_DIR", "/proc/cs-data-here")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    code, out, err = cs("tenant", "list", *flag)
    assert code == 2, (out, err)
    if flag:
        assert _json(out)["code"] == "bad_setting" and _json(out)["error"].startswith("CS_DATA_DIR:")
    else:
        assert err.strip().startswith("error: CS_DATA_DIR:") and len(err.strip().splitlines()) == 1


def test_serve_on_a_port_in_use_is_one_line_and_starts_nothing(cs, monkeypatch, tmp_path):
    import socket

    monkeypatch.setenv("CS_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code, out, err = cs("serve", "--port", str(port))
    assert code == 1 and out == "", out
    assert err.strip() == f"error: 127.0.0.1:{port} is in use by another program: stop it, or choose another --port"


def test_serve_demo_in_production_is_one_line_and_starts_nothing(cs, settings):
    """--demo was ignored in production: no tenant, no key, nothing said."""
    if not settings.redis_url:
        pytest.skip("production mode: the PostgreSQL + Redis run of this test")
    code, out, err = cs("serve", "--demo", "--port", "0")
    assert code == 2 and out == "" and "--demo" in err and "cs tenant create" in err, err
    assert len(err.strip().splitlines()) == 1


def test_worker_refuses_the_embedded_mode(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("CS_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    code = run(["worker"])
    err = capsys.readouterr().err
    assert code == 2 and "REDIS_URL" in err and len(err.strip().splitlines()) == 1


def test_customers_show(cs, tenant, client):
    client.post("/api/track", headers=auth(tenant.key), json={"events": [
        {"user_id": "u1", "event": "$identify", "properties": {"name": "Ada", "email": "ada@x.io"}},
        {"user_id": "u1", "event": "created_project"}]})
    code, out, _ = cs("customers", "show", "u1", "--tenant", tenant.id, "--json")
    assert code == 0
    body = _json(out)
    assert body["customer"]["id"] == "u1" and body["customer"]["email"] == "ada@x.io"
    assert [e["event"] for e in body["events"]][0] in ("created_project", "$identify")
    code, out, _ = cs("customers", "show", "u1", "--tenant", tenant.id)
    assert code == 0 and "Ada" in out and "created_project" in out and "health" in out
    code, _, err = cs("customers", "show", "nobody", "--tenant", tenant.id)
    assert code == 1 and "customer not found" in err


def test_customers_show_lists_the_interventions_as_the_api_does(cs, tenant, client):
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "x"}]})
    pid = client.post("/api/playbooks", headers=h, json={"name": "Welcome"}).json["id"]
    made = client.post("/api/interventions", headers=h,
                       json={"user_id": "u1", "playbook_id": pid, "channel": "in_app"}).json["id"]
    code, out, _ = cs("customers", "show", "u1", "--tenant", tenant.id, "--json")
    assert code == 0
    assert _json(out)["interventions"] == client.get("/api/customers/u1", headers=h).json["interventions"]
    assert [i["id"] for i in _json(out)["interventions"]] == [made]
    code, out, _ = cs("customers", "show", "u1", "--tenant", tenant.id)
    assert code == 0 and "Interventions" in out and made in out and "planned" in out and "in_app" in out


def test_stored_text_that_looks_like_markup_is_shown_as_it_is(cs, tenant, client, tmp_path):
    """A name, a user id, a label is data: rich must not read `[/x]` (a crash, after the
    write was made) or `[red]` (a word lost) in it, in any table or line."""
    code, out, err = cs("tenant", "create", "[/z] Co", "--owner-email", "z@z.example")
    assert code == 0 and "[/z] Co" in out, err
    code, out, _ = cs("tenant", "list")
    assert code == 0 and "[/z] Co" in out
    client.post("/api/track", headers=auth(tenant.key), json={"events": [
        {"user_id": "[/u]", "event": "$identify", "properties": {"name": "[red]Red", "company": "[/c]"}},
        {"user_id": "[/u]", "event": "signed_up"}]})
    code, out, err = cs("customers", "list", "--tenant", tenant.id)
    assert code == 0 and "[/u]" in out and "[red]Red" in out, err
    code, out, err = cs("customers", "show", "[/u]", "--tenant", tenant.id)
    assert code == 0 and "[red]Red" in out and "[/c]" in out, err
    code, out, err = cs("decide", "dry-run", "[/u]", "--tenant", tenant.id)
    assert code == 0 and "[/u]" in out, err
    path = tmp_path / "p.json"
    path.write_text(json.dumps([{"name": "[/p] promo"}]))
    code, out, err = cs("playbooks", "apply", str(path), "--tenant", tenant.id)
    assert code == 0 and "[/p] promo" in out, err
    code, out, err = cs("keys", "issue", "--tenant", tenant.id, "--role", "viewer", "--permission", "read",
                        "--label", "[/oops]")
    assert code == 0, err
    code, out, err = cs("keys", "list", "--tenant", tenant.id)
    assert code == 0 and "[/oops]" in out, err
