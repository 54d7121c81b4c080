"""The always-on holdout (docs/decisions.md, "Holdout and uplift"): held-out users get a
`held_out` intervention instead of a contact, never delivered and never counted against
contact limits, and its outcome is settled like a delivered one."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import select

from cs_daemon.decisions import holdout, requests
from cs_daemon.decisions.models import DecisionRequest
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.interventions import outcomes
from cs_daemon.interventions.models import Intervention
from cs_daemon.outbox.models import OutboxEvent
from tests.conftest import auth

EXIT = {"event": "report_created", "within_days": 7}


def users_of(tenant_id: str, percent: float) -> tuple[str, str]:
    """The first user id held out at `percent` and the first one treated."""
    ids = [f"user-{n}" for n in range(200)]
    held = next(u for u in ids if holdout.held_out(tenant_id, u, percent))
    treated = next(u for u in ids if not holdout.held_out(tenant_id, u, percent))
    return held, treated


@pytest.fixture
def world(client, make_tenant, receiver):
    """Half the users held out, full_auto, a webhook endpoint for every event and a
    playbook on the webhook channel that fires on signed_up."""
    tenant = make_tenant("Hold", plan_tier="growth", config={"holdout_percent": 50, "approvalMode": "full_auto"})
    h = auth(tenant.key)
    assert client.post("/api/webhooks/endpoints", headers=h, json={"url": receiver.url}).status_code == 201
    tenant.pid = _playbook(client, tenant, constraints={"channels": ["webhook"], "max_per_user": 1})
    tenant.held, tenant.treated = users_of(tenant.id, 50)
    return tenant


def _playbook(client, tenant, name="welcome", **body):
    h = auth(tenant.key)
    resp = client.post("/api/playbooks", headers=h, json={
        "name": name, "entry_conditions": {"trigger": {"event": "signed_up"}}, "exit_conditions": EXIT, **body})
    assert resp.status_code == 201, resp.json
    client.put(f"/api/playbooks/{resp.json['id']}/status", headers=h, json={"status": "active"})
    return resp.json["id"]


def _track(client, tenant, user, event, key=None):
    resp = client.post("/api/track", headers=auth(key or tenant.key), json={"events": [
        {"user_id": user, "event": "$identify", "properties": {"email": f"{user}@x.io", "name": "Ada"}},
        {"user_id": user, "event": event}]})
    assert resp.status_code == 200, resp.json


def _decide(rt, tenant):
    with rt.session(tenant.id) as s:
        owed = s.scalars(select(DecisionRequest.id).where(DecisionRequest.done_at.is_(None))).all()
    for request_id in owed:
        requests.process(rt, request_id)


def _of(rt, tenant, user) -> list[Intervention]:
    with rt.session(tenant.id) as s:
        rows = list(s.scalars(select(Intervention).where(Intervention.user_id == user)
                              .order_by(Intervention.planned_at, Intervention.id)))
        s.expunge_all()
        return rows


def _send_everything(rt, tenant):
    with rt.session(tenant.id) as s:
        ids = s.scalars(select(Delivery.id).where(Delivery.status.in_(("pending", "retrying")))).all()
    for delivery_id in ids:
        delivery.attempt(rt, delivery_id)


def _signed_up(client, rt, world, user):
    _track(client, world, user, "signed_up")
    _decide(rt, world)
    return _of(rt, world, user)


# --- who is held out ------------------------------------------------------------------------


def test_the_bucket_is_the_documented_hash():
    import hashlib

    for tenant_id, user_id in (("t-1", "u-1"), ("3f1c", "ada@example.com"), ("x", "")):
        digest = hashlib.sha256(f"{tenant_id}:{user_id}".encode()).hexdigest()
        assert holdout.bucket(tenant_id, user_id) == int(digest[:8], 16) % 10000


@pytest.mark.parametrize("percent", [5, 12.5, 50])
def test_the_held_out_share_is_close_to_holdout_percent_and_stable(percent):
    ids = [f"synthetic-{n}" for n in range(2000)]
    held = {u for u in ids if holdout.held_out("tenant-a", u, percent)}
    expected = 2000 * percent / 100
    assert abs(len(held) - expected) <= 4 * (expected * (1 - percent / 100)) ** 0.5 + 1
    assert held == {u for u in ids if holdout.held_out("tenant-a", u, percent)}       # stable
    assert held <= {u for u in ids if holdout.held_out("tenant-a", u, min(50, percent * 2))}   # only adds
    assert held != {u for u in ids if holdout.held_out("tenant-b", u, percent)}       # per tenant


def test_zero_holds_out_nobody():
    assert not any(holdout.held_out("tenant-a", f"synthetic-{n}", 0) for n in range(2000))


@pytest.mark.parametrize("value", [-1, 50.5, "5", True])
def test_holdout_percent_is_a_number_from_0_to_50(client, tenant, value):
    resp = client.patch("/api/settings", headers=auth(tenant.key), json={"config": {"holdout_percent": value}})
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "config.holdout_percent"


# --- what a held-out user gets ----------------------------------------------------------------


def test_a_held_out_user_gets_a_held_out_intervention_and_nothing_is_sent(client, rt, world, receiver, clock):
    [held] = _signed_up(client, rt, world, world.held)
    [treated] = _signed_up(client, rt, world, world.treated)
    assert (held.status, held.playbook_id, held.source) == ("held_out", world.pid, "engine")
    assert held.attribution_until == clock.now() + timedelta(days=7) and held.delivered_at is None
    assert treated.status == "approved"
    _send_everything(rt, world)
    assert [iv.status for iv in _of(rt, world, world.treated)] == ["delivered"]
    with rt.session(world.id) as s:
        assert s.scalars(select(Delivery).where(Delivery.subject_id == held.id)).all() == []
        kinds = [e.payload for e in s.scalars(select(OutboxEvent))]
    assert not [p for p in kinds if p.get("user_id") == world.held]       # no webhook event either
    bodies = [json.loads(r.body) for r in receiver.requests]
    assert bodies and all(world.held not in json.dumps(b) for b in bodies)
    assert any(b.get("user_id") == world.treated for b in bodies)


def test_held_out_interventions_are_listed_and_filtered(client, rt, world):
    [held] = _signed_up(client, rt, world, world.held)
    _signed_up(client, rt, world, world.treated)
    h = auth(world.key)
    listed = client.get("/api/interventions?status=held_out", headers=h).json["interventions"]
    assert [(i["id"], i["status"], i["user_id"]) for i in listed] == [(held.id, "held_out", world.held)]
    assert len(client.get("/api/interventions", headers=h).json["interventions"]) == 2
    shown = client.get(f"/api/customers/{world.held}", headers=h).json["interventions"]
    assert [(i["id"], i["status"]) for i in shown] == [(held.id, "held_out")]
    assert client.get("/api/interventions?status=nonsense", headers=h).status_code == 400


@pytest.mark.parametrize("method, action, code", [
    ("put", "approve", 404), ("put", "pause", 409), ("put", "reject", 404), ("put", "rollback", 404),
    ("patch", "", 404),
])
def test_no_review_action_moves_a_held_out_intervention(client, rt, world, method, action, code):
    [held] = _signed_up(client, rt, world, world.held)
    path = f"/api/interventions/{held.id}" + (f"/{action}" if action else "")
    body = {"message_body": "Hi"} if method == "patch" else {"reason": "no"}
    resp = getattr(client, method)(path, headers=auth(world.key), json=body)
    assert resp.status_code == code and resp.json["code"] == "invalid_state", resp.json
    assert [iv.status for iv in _of(rt, world, world.held)] == ["held_out"]
    with rt.session(world.id) as s:
        assert s.scalars(select(Delivery)).all() == []


# --- outcomes -----------------------------------------------------------------------------------


def test_a_held_out_users_exit_conditions_in_the_window_settle_it_positive(client, rt, world, clock):
    [held] = _signed_up(client, rt, world, world.held)
    clock.advance(hours=3)
    _track(client, world, world.held, "report_created")
    [settled] = _of(rt, world, world.held)
    assert (settled.status, settled.outcome, settled.outcome_at) == ("held_out", "positive", clock.now())
    assert settled.responded_at is None
    with rt.session(world.id) as s:
        assert s.scalars(select(OutboxEvent).where(OutboxEvent.event_type == "outcome.recorded")).all() == []
    items = client.get("/api/playbooks", headers=auth(world.key)).json["playbooks"]
    assert items[0]["success_rate"] is None          # the rate is of what the playbook did
    shown = client.get(f"/api/customers/{world.held}", headers=auth(world.key)).json["interventions"]
    assert shown[0]["outcome"] == "positive"


def test_a_held_out_window_that_closes_without_the_exit_conditions_is_neutral(client, rt, world, clock):
    _signed_up(client, rt, world, world.held)
    clock.advance(days=6)
    with rt.session(world.id) as s:
        assert outcomes.sweep(s, now=rt.now()) == 0
    clock.advance(days=1)
    with rt.session(world.id) as s:
        assert outcomes.sweep(s, now=rt.now()) == 1
    [settled] = _of(rt, world, world.held)
    assert (settled.status, settled.outcome) == ("held_out", "neutral")


# --- contact limits -----------------------------------------------------------------------------


def test_held_out_decisions_count_against_no_contact_limit(client, rt, world, clock):
    h = auth(world.key)
    client.put(f"/api/playbooks/{world.pid}", headers=h, json={"constraints": {
        "channels": ["webhook"], "max_per_user": 1, "max_per_day": 1}})
    assert [iv.status for iv in _signed_up(client, rt, world, world.held)] == ["held_out"]
    assert [iv.status for iv in _signed_up(client, rt, world, world.treated)] == ["approved"]   # max_per_day
    clock.advance(hours=25)
    # while held out, the user's own held-out decisions pace them as contacts would
    assert [iv.status for iv in _signed_up(client, rt, world, world.held)] == ["held_out"]
    assert client.patch("/api/settings", headers=h, json={"config": {"holdout_percent": 0}}).status_code == 200
    assert [iv.status for iv in _signed_up(client, rt, world, world.held)] == ["held_out", "approved"]


def test_a_test_mode_decision_for_a_held_out_user_is_held_out_and_test(client, rt, world):
    test_key = world.issue("admin", ["full"], test=True)
    _track(client, world, world.held, "signed_up", key=test_key)
    _decide(rt, world)
    [held] = _of(rt, world, world.held)
    assert (held.status, held.test) == ("held_out", True)
    with rt.session(world.id) as s:
        assert s.scalars(select(Delivery)).all() == []


def test_a_dry_run_paces_a_held_out_user_as_the_engine_does_and_says_held_out(client, rt, world):
    """It ignored the user's held-out decisions, so it answered `send` where the engine,
    a moment later, decided nothing."""
    h = auth(world.key)
    _track(client, world, world.held, "signed_up")
    first = client.post("/api/interventions/dry-run", headers=h, json={"user_id": world.held}).json["decision"]
    assert first["action"] == "send" and "held out" in first["reason"], first
    assert [iv.status for iv in _signed_up(client, rt, world, world.held)] == ["held_out"]
    again = client.post("/api/interventions/dry-run", headers=h, json={"user_id": world.held}).json["decision"]
    assert again["action"] == "none" and "max_per_user" in again["reason"], again
    _track(client, world, world.treated, "signed_up")
    treated = client.post("/api/interventions/dry-run", headers=h, json={"user_id": world.treated})
    assert treated.json["decision"]["action"] == "send" and "reason" not in treated.json["decision"], treated.json
