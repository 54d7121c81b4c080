"""`cs webhooks`: the delivery log, one delivery's attempts and replay, against real
receivers on loopback (docs/webhooks.md). The commands run on real time, so the deliveries
here are made with the test clock set hours back and driven up to (never past) now."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select

from cs_daemon.clock import FakeClock
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.outbox import service as outbox
from tests.conftest import auth
from tests.support.receiver import Receiver

DELIVERY_FIELDS = {"id", "event_id", "event_type", "kind", "endpoint_id", "url", "status", "attempts",
                   "next_attempt_at", "created_at", "delivered_at", "test"}
ATTEMPT_FIELDS = {"number", "at", "status_code", "latency_ms", "error", "response_excerpt"}
SCHEDULE = [timedelta(0)] + list(delivery.RETRY_DELAYS)   # 2 h 42 min 30 s in all


@pytest.fixture
def clock():
    return FakeClock(datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=6))


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch):
    monkeypatch.setenv("ALLOW_PRIVATE_WEBHOOK_URLS", "1")   # the receivers are on loopback


@pytest.fixture
def growth(make_tenant):
    return make_tenant("Hooks", plan_tier="growth")


def register(client, tenant, url, events=None) -> str:
    body = {"url": url} if events is None else {"url": url, "events": events}
    resp = client.post("/api/webhooks/endpoints", headers=auth(tenant.key), json=body)
    assert resp.status_code == 201, resp.json
    return resp.json["endpoint"]["id"]


def emit(rt, tenant, kind="user.risk_changed") -> Delivery:
    """One outbox event; returns the one delivery it made."""
    with rt.session(tenant.id) as s:
        event_id = outbox.record(s, tenant.id, kind, {"user_id": "u1", "changed_at": rt.now().isoformat()},
                                 now=rt.now())
        [made] = s.scalars(select(Delivery).where(Delivery.subject_id == event_id))
        return made


def fail_for_good(rt, clock, ids: list[str]) -> None:
    """Six failed attempts of each delivery, on the retry schedule."""
    for delay in SCHEDULE:
        clock.advance(seconds=delay.total_seconds())
        for delivery_id in ids:
            delivery.attempt(rt, delivery_id)
    with rt.session() as s:
        assert {s.get(Delivery, i).status for i in ids} == {"failed"}


def listed(cs, *argv) -> list[dict]:
    code, out, err = cs("webhooks", "deliveries", *argv, "--json")
    assert code == 0, err
    return json.loads(out)["deliveries"]


# -- the log -----------------------------------------------------------------------------------

def test_deliveries_lists_newest_first_and_filters(cs, client, growth, make_tenant, rt, clock):
    ok, broken = Receiver(), Receiver(script=[500])
    try:
        risk = register(client, growth, ok.url, ["user.risk_changed"])
        stage = register(client, growth, broken.url, ["user.stage_changed"])
        old = emit(rt, growth)                                  # 6 h ago, delivered
        assert delivery.attempt(rt, old.id) == "delivered"
        clock.advance(hours=5, minutes=30)
        retrying = emit(rt, growth, "user.stage_changed")       # 30 min ago, one 500
        assert delivery.attempt(rt, retrying.id) == "retrying"
        clock.advance(minutes=1)
        pending = emit(rt, growth)                              # 29 min ago, not attempted

        everything = listed(cs, "--tenant", growth.id)
        assert [d["id"] for d in everything] == [pending.id, retrying.id, old.id]
        assert set(everything[1]) == DELIVERY_FIELDS and set(everything[1]["attempts"][0]) == ATTEMPT_FIELDS
        assert [d["status"] for d in everything] == ["pending", "retrying", "delivered"]
        assert everything[1]["attempts"][0]["status_code"] == 500 and everything[1]["next_attempt_at"]

        assert [d["id"] for d in listed(cs, "--tenant", growth.id, "--status", "retrying")] == [retrying.id]
        assert [d["id"] for d in listed(cs, "--tenant", growth.id, "--endpoint", risk)] == [pending.id, old.id]
        assert [d["id"] for d in listed(cs, "--tenant", growth.id, "--since", "1h")] == [pending.id, retrying.id]
        assert [d["id"] for d in listed(cs, "--tenant", growth.id, "--since", "1h", "--endpoint", stage)] == [
            retrying.id]
        assert [d["id"] for d in listed(cs, "--tenant", growth.id, "--limit", "1")] == [pending.id]
        assert listed(cs, "--tenant", growth.id, "--since", "10m") == []
        assert listed(cs, "--tenant", make_tenant("Other", plan_tier="growth").id) == []

        code, out, _ = cs("webhooks", "deliveries", "--tenant", growth.id)
        assert code == 0
        assert all(d.id in out for d in (old, pending, retrying))
        assert "retrying" in out and "500" in out and "user.stage_changed" in out
    finally:
        ok.close()
        broken.close()


def test_an_endpoint_of_another_tenant_is_not_found(cs, client, growth, make_tenant, receiver):
    endpoint = register(client, growth, receiver.url)
    other = make_tenant("Other", plan_tier="growth")
    code, _, err = cs("webhooks", "deliveries", "--tenant", other.id, "--endpoint", endpoint)
    assert code == 1 and err.strip() == "error: webhook endpoint not found"


def test_email_deliveries_are_neither_listed_nor_replayed(cs, client, growth, rt, receiver):
    register(client, growth, receiver.url)
    hook = emit(rt, growth)
    with rt.session(growth.id) as s:
        email = delivery.create(s, growth.id, kind="channel", channel="email", url="mailto:ada@example.com",
                                body={"intervention_id": "iv1"}, secret_enc="", event_type="channel.email",
                                now=rt.now(), enqueue=False)
        email.status, email.next_attempt_at, email_id = "failed", None, email.id
    assert [d["id"] for d in listed(cs, "--tenant", growth.id)] == [hook.id]
    code, out, _ = cs("webhooks", "replay", "--failed", "--since", "7d", "--tenant", growth.id, "--json")
    assert code == 0 and json.loads(out)["replayed"] == 0
    with rt.session() as s:
        assert s.get(Delivery, email_id).attempts == 0


# -- one delivery ------------------------------------------------------------------------------

def test_show_gives_the_facts_and_every_attempt(cs, client, growth, rt, clock, receiver):
    receiver.script = [500, 200]
    endpoint = register(client, growth, receiver.url)
    made = emit(rt, growth)
    t0 = clock.now()
    delivery.attempt(rt, made.id)
    clock.advance(seconds=30)
    delivery.attempt(rt, made.id)

    code, out, _ = cs("webhooks", "show", made.id, "--json")
    assert code == 0
    shown = json.loads(out)["delivery"]
    assert shown["id"] == made.id and shown["tenant_id"] == growth.id and shown["endpoint_id"] == endpoint
    assert shown["status"] == "delivered" and shown["event_id"] == made.subject_id
    assert [a["number"] for a in shown["attempts"]] == [1, 2]
    assert [a["status_code"] for a in shown["attempts"]] == [500, 200]
    assert [datetime.fromisoformat(a["at"]) for a in shown["attempts"]] == [t0, t0 + timedelta(seconds=30)]
    assert [a["error"] for a in shown["attempts"]] == ["HTTP 500", None]
    assert shown["attempts"][0]["response_excerpt"] == '{"error": "nope"}'
    assert all(a["latency_ms"] >= 0 for a in shown["attempts"])

    code, out, _ = cs("webhooks", "show", made.id)
    assert code == 0
    for words in ("delivered", "2 of 6", "HTTP 500", '{"error": "nope"}', '{"ok": true}', made.subject_id):
        assert words in out, words


# -- replay ------------------------------------------------------------------------------------

def test_replay_sends_the_same_delivery_again_and_delivers_once_the_receiver_is_fixed(
        cs, client, growth, rt, clock, receiver):
    receiver.script = [503]
    endpoint = register(client, growth, receiver.url)
    made = emit(rt, growth)
    fail_for_good(rt, clock, [made.id])

    code, out, _ = cs("webhooks", "replay", made.id)       # still broken: one more failure, logged
    assert code == 0 and "attempt 7 failed" in out and "failed" in out
    assert len(receiver.requests) == 7

    receiver.script = [503] * 7 + [200]                    # the receiver is fixed
    code, out, _ = cs("webhooks", "replay", made.id, "--json")
    assert code == 0
    replayed = json.loads(out)["delivery"]
    assert replayed["id"] == made.id and replayed["status"] == "delivered"
    assert [a["number"] for a in replayed["attempts"]] == list(range(1, 9))
    assert replayed["attempts"][-1]["status_code"] == 200
    first, last = receiver.requests[0], receiver.requests[-1]
    assert last.headers["webhook-id"] == first.headers["webhook-id"] == made.id
    assert last.headers["X-Service-Event-Id"] == made.subject_id and last.body == first.body
    log = client.get(f"/api/webhooks/endpoints/{endpoint}/deliveries", headers=auth(growth.key)).json
    assert [(d["id"], d["status"]) for d in log["deliveries"]] == [(made.id, "delivered")]


def test_replay_refuses_a_delivery_cancelled_by_a_pause(cs, client, growth, rt, receiver):
    h = auth(growth.key)
    register(client, growth, receiver.url)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "x"}]})
    pid = client.post("/api/playbooks", headers=h, json={"name": "p"}).json["id"]
    iv = client.post("/api/interventions", headers=h, json={"user_id": "u1", "playbook_id": pid,
                                                            "channel": "webhook"}).json["id"]
    client.put(f"/api/interventions/{iv}/approve", headers=h)
    assert client.put(f"/api/interventions/{iv}/pause", headers=h).json["status"] == "planned"
    with rt.session(growth.id) as s:
        [made] = s.scalars(select(Delivery).where(Delivery.subject_id == iv)).all()
    code, out, err = cs("webhooks", "replay", made.id)
    assert code != 0 and out == ""
    assert "cancelled" in err and "not sent again" in err and "Traceback" not in err
    code, out, _ = cs("webhooks", "replay", made.id, "--json")
    assert code != 0 and json.loads(out)["code"] == "invalid_state"
    assert receiver.requests == []
    with rt.session(growth.id) as s:
        assert s.get(Delivery, made.id).status == "canceled"


def test_replay_failed_replays_the_tenants_failed_deliveries_in_the_window(
        cs, client, growth, make_tenant, rt, clock, receiver):
    other_receiver = Receiver(script=[503])
    try:
        other = make_tenant("Other", plan_tier="growth")
        register(client, growth, receiver.url)
        register(client, other, other_receiver.url)
        receiver.script = [503]
        too_old = emit(rt, growth)                                   # created 6 h ago
        fail_for_good(rt, clock, [too_old.id])
        clock.advance(minutes=27, seconds=30)                        # now: 2 h 50 min ago
        first = emit(rt, growth)
        clock.advance(minutes=1)
        second, theirs = emit(rt, growth), emit(rt, other)
        fail_for_good(rt, clock, [first.id, second.id, theirs.id])   # until 6 min 30 s ago
        waiting = emit(rt, growth)                                   # pending: not replayed
        receiver.script = [503] * 18 + [200, 503]                    # first recovers, second not

        code, out, _ = cs("webhooks", "replay", "--failed", "--since", "3h", "--tenant", growth.id, "--json")
        assert code == 0
        summary = json.loads(out)
        assert (summary["replayed"], summary["delivered"], summary["failed"]) == (2, 1, 1)
        assert [(d["id"], d["status"]) for d in summary["deliveries"]] == [(first.id, "delivered"),
                                                                         (second.id, "failed")]
        assert [len(d["attempts"]) for d in summary["deliveries"]] == [7, 7]
        assert len(receiver.requests) == 20 and len(other_receiver.requests) == 6
        with rt.session() as s:
            assert s.get(Delivery, too_old.id).attempts == 6 and s.get(Delivery, waiting.id).attempts == 0

        code, out, err = cs("webhooks", "replay", "--failed", "--since", "3h", "--tenant", growth.id)
        assert code == 0
        assert "replayed 1 failed delivery" in out and "0 delivered, 1 still failing" in out
        assert second.id in out and first.id not in out
        assert "replaying failed deliveries" in err and "1/1" in err
    finally:
        other_receiver.close()


def test_replay_failed_with_nothing_failed_says_so(cs, growth):
    code, out, _ = cs("webhooks", "replay", "--failed", "--tenant", growth.id, "--json")
    assert code == 0
    assert json.loads(out) == {"replayed": 0, "delivered": 0, "failed": 0, "deliveries": [], "skipped": []}


# -- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["deliveries", "--tenant", "{tenant}", "--since", "yesterday"], "--since"),
    (["deliveries", "--tenant", "{tenant}", "--since", "0h"], "--since"),
    (["deliveries", "--tenant", "{tenant}", "--status", "lost"], "--status"),
    (["deliveries", "--tenant", "no-such-tenant"], "tenant not found"),
    (["replay", "--failed", "--tenant", "{tenant}", "--since", "1 day"], "--since"),
    (["replay"], "give a DELIVERY_ID, or --failed"),
    (["replay", "some-id", "--failed", "--tenant", "{tenant}"], "not both"),
    (["replay", "--failed"], "--failed needs --tenant"),
    (["replay", "some-id", "--tenant", "{tenant}"], "go with --failed"),
    (["replay", "no-such-delivery"], "no delivery with id no-such-delivery"),
    (["show", "no-such-delivery"], "no delivery with id no-such-delivery"),
])
def test_bad_input_is_one_clear_line_and_non_zero(cs, growth, argv, words):
    code, out, err = cs("webhooks", *[a.replace("{tenant}", growth.id) for a in argv])
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and words in lines[0]
    assert out == ""


def test_bad_input_with_json_is_one_json_error(cs):
    code, out, _ = cs("webhooks", "replay", "no-such-delivery", "--json")
    assert code == 1
    assert json.loads(out) == {"error": "no delivery with id no-such-delivery", "code": "not_found"}


def _webhook_intervention(client, tenant) -> str:
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "x"}]})
    pid = client.post("/api/playbooks", headers=h, json={"name": "p"}).json["id"]
    iv = client.post("/api/interventions", headers=h, json={"user_id": "u1", "playbook_id": pid,
                                                            "channel": "webhook", "message_body": "hi"}).json["id"]
    assert client.put(f"/api/interventions/{iv}/approve", headers=h).status_code == 200
    return iv


def _status(client, tenant, iv) -> str:
    listed = client.get("/api/interventions", headers=auth(tenant.key)).json["interventions"]
    return next(i["status"] for i in listed if i["id"] == iv)


def test_replaying_a_failed_interventions_delivery_sends_it_and_a_rolled_back_ones_is_refused(
        cs, client, growth, rt, clock, receiver):
    """The replay made an attempt that sent nothing ('the intervention is failed') and
    answered 0; on a rolled-back intervention's delivered delivery it turned it failed."""
    register(client, growth, receiver.url)
    receiver.script = [503]
    iv = _webhook_intervention(client, growth)
    with rt.session(growth.id) as s:
        [made] = s.scalars(select(Delivery).where(Delivery.subject_id == iv)).all()
    fail_for_good(rt, clock, [made.id])
    assert _status(client, growth, iv) == "failed"
    receiver.script = [503] * 6 + [200]
    code, out, _ = cs("webhooks", "replay", made.id, "--json")
    assert code == 0 and json.loads(out)["delivery"]["status"] == "delivered"
    assert len(receiver.requests) == 7 and _status(client, growth, iv) == "delivered"

    assert client.put(f"/api/interventions/{iv}/rollback", headers=auth(growth.key)).status_code == 200
    code, out, _ = cs("webhooks", "replay", made.id, "--json")
    assert code != 0 and json.loads(out)["code"] == "invalid_state" and "rolled_back" in json.loads(out)["error"]
    with rt.session(growth.id) as s:
        assert s.get(Delivery, made.id).status == "delivered"


def test_replay_failed_goes_on_past_a_delivery_it_may_not_send(cs, client, growth, rt, clock, receiver):
    """It stopped at the first refusal (a deleted endpoint) and replayed none after it."""
    gone = register(client, growth, receiver.url)
    receiver.script = [503]
    first = emit(rt, growth)
    fail_for_good(rt, clock, [first.id])
    client.delete(f"/api/webhooks/endpoints/{gone}", headers=auth(growth.key))
    register(client, growth, receiver.url)
    clock.advance(seconds=1)
    second = emit(rt, growth)
    fail_for_good(rt, clock, [second.id])
    receiver.script = [503] * 12 + [200]
    code, out, _ = cs("webhooks", "replay", "--failed", "--tenant", growth.id, "--json")
    assert code == 0, out
    summary = json.loads(out)
    assert (summary["replayed"], summary["delivered"]) == (1, 1)
    assert [d["id"] for d in summary["deliveries"]] == [second.id]
    assert [s["id"] for s in summary["skipped"]] == [first.id] and "deleted" in summary["skipped"][0]["error"]
    code, out, _ = cs("webhooks", "replay", "--failed", "--tenant", growth.id)
    assert code == 0 and f"skipped delivery {first.id}" in out
