"""cs playbooks preview-count / apply and cs decide dry-run."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select

from cs_daemon.decisions import requests
from cs_daemon.decisions.models import DecisionRequest
from tests.conftest import NO_HOLDOUT, auth

PLAYBOOKS_YAML = """
- name: Welcome
  status: active
  entry_conditions:
    trigger: {event: signed_up}
  strategy_hints: {goal: first project, preferred_channel: in_app}
- name: Pros
  entry_conditions:
    field: traits.plan
    op: eq
    value: pro
"""


def _users(client, tenant):
    client.post("/api/track", headers=auth(tenant.key), json={"events": [
        {"user_id": "a", "event": "$identify", "properties": {"plan": "pro"}},
        {"user_id": "b", "event": "$identify", "properties": {"plan": "free"}},
        {"user_id": "a", "event": "signed_up"}]})


def test_preview_count_from_json_text_and_file(cs, tenant, client, tmp_path):
    _users(client, tenant)
    code, out, _ = cs("playbooks", "preview-count", "--tenant", tenant.id,
                      "--conditions", '{"field": "traits.plan", "op": "eq", "value": "pro"}', "--json")
    assert code == 0 and json.loads(out) == {"matching_users": 1}
    path = tmp_path / "tree.json"
    path.write_text("{}")
    code, out, _ = cs("playbooks", "preview-count", "--tenant", tenant.id, "--conditions", str(path))
    assert code == 0 and "2 users match" in out
    code, _, err = cs("playbooks", "preview-count", "--tenant", tenant.id, "--conditions", '{"field": "nope"}')
    assert code != 0 and "entry_conditions.field" in err and len(err.strip().splitlines()) == 1
    code, _, err = cs("playbooks", "preview-count", "--tenant", tenant.id, "--conditions", "missing.json")
    assert code != 0 and "neither JSON nor a readable file" in err


def test_apply_is_idempotent_by_name(cs, tenant, client, tmp_path):
    path = tmp_path / "playbooks.yaml"
    path.write_text(PLAYBOOKS_YAML)
    code, out, _ = cs("playbooks", "apply", str(path), "--tenant", tenant.id, "--json")
    assert code == 0
    first = json.loads(out)["playbooks"]
    assert [(p["name"], p["result"]) for p in first] == [("Welcome", "created"), ("Pros", "created")]
    code, out, _ = cs("playbooks", "apply", str(path), "--tenant", tenant.id, "--json")
    second = json.loads(out)["playbooks"]
    assert [p["result"] for p in second] == ["updated", "updated"]
    assert [p["id"] for p in second] == [p["id"] for p in first]
    listed = client.get("/api/playbooks", headers=auth(tenant.key)).json["playbooks"]
    assert {p["name"]: p["status"] for p in listed} == {"Welcome": "active", "Pros": "draft"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"name": "X", "constraints": {"channels": ["fax"]}}]))
    code, _, err = cs("playbooks", "apply", str(bad), "--tenant", tenant.id)
    assert code != 0 and "constraints.channels" in err
    assert len(client.get("/api/playbooks", headers=auth(tenant.key)).json["playbooks"]) == 2
    # a misspelt key was dropped, and a playbook without its entry conditions applied
    typo = tmp_path / "typo.yaml"
    typo.write_text("name: Typo\nentry_condition:\n  trigger: {event: signed_up}\n")
    code, out, err = cs("playbooks", "apply", str(typo), "--tenant", tenant.id, "--json")
    assert code == 2 and json.loads(out)["code"] == "validation_failed" and "'entry_condition'" in err
    assert len(client.get("/api/playbooks", headers=auth(tenant.key)).json["playbooks"]) == 2


def test_decide_dry_run(cs, tenant, client, tmp_path):
    _users(client, tenant)
    path = tmp_path / "p.yaml"
    path.write_text(PLAYBOOKS_YAML)
    cs("playbooks", "apply", str(path), "--tenant", tenant.id)
    code, out, _ = cs("decide", "dry-run", "a", "--tenant", tenant.id, "--json")
    assert code == 0
    body = json.loads(out)
    assert body["dry_run"] is True and body["decision"]["action"] == "send"
    assert body["decision"]["channel"] == "in_app"
    code, out, _ = cs("decide", "dry-run", "a", "--tenant", tenant.id)
    assert code == 0 and "picked" in out and "Welcome" in out
    code, _, err = cs("decide", "dry-run", "ghost", "--tenant", tenant.id)
    assert code == 1 and "not found" in err


def test_the_readme_example_playbook_plans_a_welcome_for_a_signup(cs, make_tenant, client, rt):
    """docs/examples/welcome.yaml, applied as the README's "A first playbook" says, plans
    one email for a user who signs up with an email address, waiting for approval."""
    tenant = make_tenant(config=dict(NO_HOLDOUT))
    example = Path(__file__).resolve().parents[2] / "docs" / "examples" / "welcome.yaml"
    code, out, _ = cs("playbooks", "apply", str(example), "--tenant", tenant.id, "--json")
    assert code == 0 and json.loads(out)["playbooks"][0]["result"] == "created"
    client.post("/api/track", headers=auth(tenant.key), json={"events": [
        {"user_id": "bo", "event": "$identify", "properties": {"email": "bo@example.com", "name": "Bo"}},
        {"user_id": "bo", "event": "signup"},
        {"user_id": "anon", "event": "signup"}]})
    with rt.session(tenant.id) as session:     # the owed decisions, as the job would
        owed = list(session.scalars(select(DecisionRequest.id)))
    for request_id in owed:
        requests.process(rt, request_id)
    code, out, _ = cs("interventions", "list", "--tenant", tenant.id, "--json")
    planned = json.loads(out)["interventions"]
    assert [(i["user_id"], i["status"]) for i in planned] == [("bo", "planned")]
    assert planned[0]["channel"] in ("email", "in_app")


def test_json_errors_carry_the_fields_of_the_apis_error_body(cs, tenant, client, tmp_path):
    """A plan limit's current, limit and upgrade_to, a validation failure's details: in the
    one JSON document --json prints, as in the API's answer."""
    path = tmp_path / "many.json"
    path.write_text(json.dumps([{"name": f"P{n}"} for n in range(4)]))    # trial: 3 playbooks
    code, out, err = cs("playbooks", "apply", str(path), "--tenant", tenant.id, "--json")
    body = json.loads(out)
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert body["code"] == "plan_limit" and (body["current"], body["limit"], body["upgrade_to"]) == (3, 3, "starter")
    path.write_text(json.dumps([{"name": "X", "constraints": {"channels": ["fax"]}}]))
    code, out, _ = cs("playbooks", "apply", str(path), "--tenant", tenant.id, "--json")
    body = json.loads(out)
    assert code == 1 and body["code"] == "validation_failed"
    assert body["details"][0]["field"].startswith("constraints.channels")
