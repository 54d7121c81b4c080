"""`cs actions`: the dispatch log of external actions and one action with its dispatch
attempts and outcome, against a real receiver on loopback (docs/external-actions.md). The commands
run on real time, so the actions here are made with the test clock set hours back."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select

from cs_daemon.clock import FakeClock
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from tests.conftest import auth
from tests.support.receiver import Receiver

SCHEMA = {"type": "object", "properties": {"points": {"type": "integer", "minimum": 1}},
          "required": ["points"], "additionalProperties": False}
ACTION_FIELDS = {"id", "action_type", "provider", "user_id", "status", "parameters", "outcome_status",
                 "outcome_result", "attempts", "dispatched_at", "completed_at", "created_at", "test"}
ATTEMPT_FIELDS = {"number", "at", "status_code", "latency_ms", "error", "response_excerpt"}


@pytest.fixture
def clock():
    return FakeClock(datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=6))


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch):
    monkeypatch.setenv("ALLOW_PRIVATE_WEBHOOK_URLS", "1")   # the receivers are on loopback


def action_type(client, tenant, name: str, provider: str, url: str) -> None:
    resp = client.post("/api/external/action-types", headers=auth(tenant.key), json={
        "name": name, "description": f"{name} for a user", "provider": provider, "parameters_schema": SCHEMA,
        "delivery_webhook": url})
    assert resp.status_code == 201, resp.json


def dispatch(client, tenant, name: str, user_id: str = "u1", points: int = 5) -> str:
    resp = client.post("/api/external/actions", headers=auth(tenant.key),
                       json={"action_type": name, "user_id": user_id, "parameters": {"points": points}})
    assert resp.status_code == 201, resp.json
    return resp.json["action"]["id"]


def send(rt, action_id: str) -> Delivery:
    """One attempt of the action's dispatch delivery."""
    with rt.session() as s:
        [made] = s.scalars(select(Delivery).where(Delivery.subject_id == action_id))
    return delivery.attempt(rt, made.id)


@pytest.fixture
def partner(client, tenant, receiver):
    client.post("/api/track", headers=auth(tenant.key), json={"events": [
        {"user_id": "u1", "event": "x"}, {"user_id": "u2", "event": "x"}]})
    action_type(client, tenant, "award_points", "loyaltyco", receiver.url)
    return tenant


def listed(cs, *argv) -> list[dict]:
    code, out, err = cs("actions", "list", *argv, "--json")
    assert code == 0, err
    return json.loads(out)["actions"]


# -- the log -----------------------------------------------------------------------------------

def test_list_is_newest_first_and_filters(cs, client, partner, make_tenant, rt, clock):
    tenant, broken = partner, Receiver(script=[500])
    try:
        action_type(client, tenant, "open_ticket", "helpdesk", broken.url)
        old = dispatch(client, tenant, "award_points")                   # 6 h ago, delivered
        assert send(rt, old) == "delivered"
        clock.advance(hours=5, minutes=30)
        failing = dispatch(client, tenant, "open_ticket", user_id="u2")  # 30 min ago, one 500
        assert send(rt, failing) == "retrying"
        clock.advance(minutes=1)
        pending = dispatch(client, tenant, "award_points", user_id="u2")  # 29 min ago, not sent

        everything = listed(cs, "--tenant", tenant.id)
        assert [a["id"] for a in everything] == [pending, failing, old]
        assert set(everything[0]) == ACTION_FIELDS
        assert [a["status"] for a in everything] == ["pending", "dispatched", "delivered"]
        assert [a["attempts"] for a in everything] == [0, 1, 1]

        assert [a["id"] for a in listed(cs, "--tenant", tenant.id, "--status", "delivered")] == [old]
        assert [a["id"] for a in listed(cs, "--tenant", tenant.id, "--provider", "helpdesk")] == [failing]
        assert [a["id"] for a in listed(cs, "--tenant", tenant.id, "--user-id", "u2")] == [pending, failing]
        assert [a["id"] for a in listed(cs, "--tenant", tenant.id, "--since", "1h")] == [pending, failing]
        assert [a["id"] for a in listed(cs, "--tenant", tenant.id, "--limit", "1")] == [pending]
        assert listed(cs, "--tenant", tenant.id, "--status", "failed") == []
        assert listed(cs, "--tenant", make_tenant("Other").id) == []

        code, out, _ = cs("actions", "list", "--tenant", tenant.id)
        assert code == 0
        assert all(i in out for i in (old, failing, pending))
        assert "open_ticket" in out and "helpdesk" in out and "dispatched" in out
        code, out, _ = cs("actions", "list", "--tenant", tenant.id, "--status", "expired")
        assert code == 0 and "no external actions match" in out
    finally:
        broken.close()


def test_a_failed_dispatch_is_listed_as_failed(cs, client, partner, rt, clock, receiver):
    receiver.script = [503]
    action_id = dispatch(client, partner, "award_points")
    for delay in [timedelta(0)] + list(delivery.RETRY_DELAYS):
        clock.advance(seconds=delay.total_seconds())
        send(rt, action_id)
    [failed] = listed(cs, "--tenant", partner.id, "--status", "failed")
    assert failed["id"] == action_id and failed["attempts"] == 6


# -- one action --------------------------------------------------------------------------------

def test_show_gives_the_action_its_dispatch_attempts_and_outcome(cs, client, partner, rt, clock, receiver):
    receiver.script = [500, 200]
    action_id = dispatch(client, partner, "award_points", points=50)
    t0 = clock.now()
    send(rt, action_id)
    clock.advance(seconds=30)
    send(rt, action_id)

    code, out, _ = cs("actions", "show", action_id, "--json")
    assert code == 0
    shown = json.loads(out)["action"]
    assert set(shown) == ACTION_FIELDS | {"tenant_id", "delivered_at", "dispatch"}
    assert shown["id"] == action_id and shown["tenant_id"] == partner.id and shown["status"] == "delivered"
    assert shown["parameters"] == {"points": 50} and shown["outcome_status"] is None
    sent = shown["dispatch"]
    assert sent["kind"] == "dispatch" and sent["url"] == receiver.url and sent["status"] == "delivered"
    assert sent["event_type"] == "external_action.dispatch" and sent["event_id"] == action_id
    assert [set(a) for a in sent["attempts"]] == [ATTEMPT_FIELDS] * 2
    assert [a["status_code"] for a in sent["attempts"]] == [500, 200]
    assert [datetime.fromisoformat(a["at"]) for a in sent["attempts"]] == [t0, t0 + timedelta(seconds=30)]
    assert sent["attempts"][0]["error"] == "HTTP 500" and sent["attempts"][0]["response_excerpt"] == '{"error": "nope"}'
    assert [r.headers["X-Service-Action-Id"] for r in receiver.requests] == [action_id] * 2

    code, out, _ = cs("actions", "show", action_id)
    assert code == 0
    for words in ("delivered", "award_points", "loyaltyco", "points", "50", "HTTP 500", '{"ok": true}',
                  "none reported yet"):
        assert words in out, words

    resp = client.post(f"/api/external/actions/{action_id}/outcome", headers=auth(partner.key),
                       json={"status": "partial", "result": {"awarded": 25}})
    assert resp.status_code == 200, resp.json
    code, out, _ = cs("actions", "show", action_id, "--tenant", partner.id, "--json")
    assert code == 0
    shown = json.loads(out)["action"]
    assert (shown["status"], shown["outcome_status"], shown["outcome_result"]) == ("completed", "partial",
                                                                                   {"awarded": 25})
    code, out, _ = cs("actions", "show", action_id)
    assert code == 0 and "outcome: partial" in out and "awarded=25" in out and "completed" in out


def test_show_in_another_tenant_is_not_found(cs, client, partner, make_tenant):
    action_id = dispatch(client, partner, "award_points")
    other = make_tenant("Other")
    code, out, err = cs("actions", "show", action_id, "--tenant", other.id)
    assert code == 1 and out == "" and err.strip() == f"error: no external action with id {action_id}"


# -- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["list", "--tenant", "{tenant}", "--status", "lost"], "--status"),
    (["list", "--tenant", "{tenant}", "--limit", "0"], "--limit"),
    (["list", "--tenant", "{tenant}", "--limit", "101"], "--limit"),
    (["list", "--tenant", "{tenant}", "--since", "yesterday"], "--since"),
    (["list", "--tenant", "no-such-tenant"], "tenant not found"),
    (["list"], "--tenant"),
    (["show", "no-such-action"], "no external action with id no-such-action"),
    (["show", "no-such-action", "--tenant", "no-such-tenant"], "tenant not found"),
])
def test_bad_input_is_one_clear_line_and_non_zero(cs, tenant, argv, words):
    code, out, err = cs("actions", *[a.replace("{tenant}", tenant.id) for a in argv])
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and words in lines[0]
    assert out == ""


def test_bad_input_with_json_is_one_json_error(cs):
    code, out, _ = cs("actions", "show", "no-such-action", "--json")
    assert code == 1
    assert json.loads(out) == {"error": "no external action with id no-such-action", "code": "not_found"}
