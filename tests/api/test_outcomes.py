"""Responses and outcomes of delivered interventions (docs/interventions.md): the attribution window
from the playbook's exit conditions, user.responded on the first event after a delivery,
outcomes (positive, negative, neutral) recorded on the event that settles them or by
the sweep, with outcome.recorded, the success rate
it feeds, and in-app clicks and dismissals reported with the stream token."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import select

from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.interventions import actors, outcomes
from cs_daemon.interventions.models import Intervention
from cs_daemon.jobs import registry
from cs_daemon.outbox.models import OutboxEvent
from tests.conftest import auth
from tests.support.processes import Deadline

EXIT = {"event": "report_created", "within_days": 7}


@pytest.fixture
def world(client, make_tenant, receiver):
    tenant = make_tenant("Crew", plan_tier="growth")
    h = auth(tenant.key)
    _track(client, tenant, [{"user_id": "u1", "event": "$identify", "properties": {"name": "Ada"}}])
    resp = client.post("/api/webhooks/endpoints", headers=h, json={"url": receiver.url})
    assert resp.status_code == 201, resp.json
    return tenant


def _track(client, tenant, events, key=None):
    resp = client.post("/api/track", headers=auth(key or tenant.key), json={"events": events})
    assert resp.status_code == 200, resp.json
    return resp.json


def _playbook(client, tenant, exit_conditions=None, name="Nudge"):
    resp = client.post("/api/playbooks", headers=auth(tenant.key),
                       json={"name": name, "exit_conditions": exit_conditions or {}})
    assert resp.status_code == 201, resp.json
    return resp.json["id"]


def _run_deliveries(rt, tenant):
    with rt.session(tenant.id) as s:
        ids = [d.id for d in s.scalars(select(Delivery).where(Delivery.status.in_(("pending", "retrying"))))]
    for delivery_id in ids:
        delivery.attempt(rt, delivery_id)


def _delivered(client, rt, tenant, pid, channel="webhook", user="u1", key=None) -> str:
    h = auth(key or tenant.key)
    resp = client.post("/api/interventions", headers=h, json={"user_id": user, "playbook_id": pid,
                                                               "channel": channel, "message_body": "Try reports"})
    assert resp.status_code == 201, resp.json
    iv = resp.json["id"]
    assert client.put(f"/api/interventions/{iv}/approve", headers=h).status_code == 200
    _run_deliveries(rt, tenant)
    assert _row(rt, tenant, iv).status == "delivered"
    return iv


def _row(rt, tenant, iv) -> Intervention:
    with rt.session(tenant.id) as s:
        row = s.get(Intervention, iv)
        s.expunge(row)
        return row


def _events(rt, tenant, kind):
    with rt.session(tenant.id) as s:
        return [o.payload for o in s.scalars(select(OutboxEvent).where(OutboxEvent.event_type == kind)
                                             .order_by(OutboxEvent.created_at))]


def _sweep(rt, tenant) -> int:
    with rt.session(tenant.id) as s:
        return outcomes.sweep(s, now=rt.now())


def _success_rate(client, tenant, pid):
    items = client.get("/api/playbooks", headers=auth(tenant.key)).json["playbooks"]
    return [p for p in items if p["id"] == pid][0]["success_rate"]


# --- the window and the responses ---------------------------------------------------------


def test_delivery_opens_a_window_of_the_playbooks_attribution_days(client, world, rt, clock):
    default = _delivered(client, rt, world, _playbook(client, world, EXIT, name="Default"))
    three = _delivered(client, rt, world, _playbook(client, world, {**EXIT, "attribution_days": 3}, name="Three"))
    assert _row(rt, world, default).attribution_until == clock.now() + timedelta(days=7)
    assert _row(rt, world, three).attribution_until == clock.now() + timedelta(days=3)


def test_the_first_event_after_delivery_is_a_response_emitted_once(client, world, rt, clock):
    pid = _playbook(client, world, EXIT)
    before = clock.now() - timedelta(minutes=5)
    iv = _delivered(client, rt, world, pid)
    clock.advance(minutes=10)
    _track(client, world, [{"user_id": "u1", "event": "old_news", "timestamp": before.isoformat()}])
    assert _events(rt, world, "user.responded") == []      # it happened before the delivery
    _track(client, world, [{"user_id": "u1", "event": "viewed_report"},
                           {"user_id": "u1", "event": "later", "timestamp": (clock.now() + timedelta(seconds=1)).isoformat()}])
    clock.advance(minutes=1)
    _track(client, world, [{"user_id": "u1", "event": "viewed_again"}])
    [responded] = _events(rt, world, "user.responded")
    assert responded == {"event": "user.responded", "user_id": "u1", "intervention_id": iv, "playbook_id": pid,
                         "channel": "webhook", "response": "event", "event_name": "viewed_report",
                         "responded_at": (clock.now() - timedelta(minutes=1)).isoformat()}
    assert _row(rt, world, iv).responded_at == clock.now() - timedelta(minutes=1)


def test_an_event_after_the_window_or_of_another_user_is_no_response(client, world, rt, clock):
    _track(client, world, [{"user_id": "u2", "event": "$identify"}])
    _delivered(client, rt, world, _playbook(client, world, {**EXIT, "attribution_days": 1}))
    _track(client, world, [{"user_id": "u2", "event": "viewed"}])
    clock.advance(days=1)
    _track(client, world, [{"user_id": "u1", "event": "viewed"}])
    assert _events(rt, world, "user.responded") == []


def test_a_rolled_back_intervention_gets_no_response_and_no_outcome(client, world, rt, clock):
    iv = _delivered(client, rt, world, _playbook(client, world, EXIT))
    assert client.put(f"/api/interventions/{iv}/rollback", headers=auth(world.key), json={}).status_code == 200
    _track(client, world, [{"user_id": "u1", "event": "report_created"}])
    clock.advance(days=8)
    assert _sweep(rt, world) == 0
    row = _row(rt, world, iv)
    assert row.responded_at is None and row.outcome is None and row.attribution_until is None
    assert _events(rt, world, "user.responded") == _events(rt, world, "outcome.recorded") == []


# --- outcomes ------------------------------------------------------------------------------


def test_the_event_that_meets_the_exit_conditions_makes_it_positive(client, world, rt, clock):
    pid = _playbook(client, world, EXIT)
    iv = _delivered(client, rt, world, pid)
    assert _sweep(rt, world) == 0 and _success_rate(client, world, pid) is None
    clock.advance(days=2)
    _track(client, world, [{"user_id": "u1", "event": "viewed_report"}])
    assert _row(rt, world, iv).outcome is None           # a response, not yet the exit
    clock.advance(minutes=1)
    _track(client, world, [{"user_id": "u1", "event": "report_created"}])
    row = _row(rt, world, iv)                            # settled by the ingest, no sweep
    assert row.outcome == "positive" and row.outcome_at == clock.now()
    assert _sweep(rt, world) == 0                        # recorded once
    _track(client, world, [{"user_id": "u1", "event": "report_created"}])
    [recorded] = _events(rt, world, "outcome.recorded")
    assert recorded == {"event": "outcome.recorded", "intervention_id": iv, "user_id": "u1", "playbook_id": pid,
                        "channel": "webhook", "outcome": "positive",
                        "delivered_at": (clock.now() - timedelta(days=2, minutes=1)).isoformat(),
                        "recorded_at": clock.now().isoformat()}
    assert _success_rate(client, world, pid) == 1.0


def test_exit_conditions_already_met_at_delivery_are_found_by_the_sweep(client, world, rt, clock):
    pid = _playbook(client, world, EXIT)
    _track(client, world, [{"user_id": "u1", "event": "report_created"}])
    iv = _delivered(client, rt, world, pid)
    assert _row(rt, world, iv).outcome is None           # no event since the delivery
    assert _sweep(rt, world) == 1
    assert _sweep(rt, world) == 0
    assert _row(rt, world, iv).outcome == "positive"
    assert [e["outcome"] for e in _events(rt, world, "outcome.recorded")] == ["positive"]


def test_a_user_who_churns_in_the_window_makes_it_negative(client, world, rt, clock):
    pid = _playbook(client, world, EXIT)
    iv = _delivered(client, rt, world, pid)
    _track(client, world, [{"user_id": "u1", "event": "subscription_canceled"}])
    assert client.get("/api/customers/u1", headers=auth(world.key)).json["customer"]["lifecycle_stage"] == "churned"
    assert _row(rt, world, iv).outcome == "negative"     # on the churning event
    assert _sweep(rt, world) == 0
    assert _success_rate(client, world, pid) == 0.0


def test_an_event_settles_only_its_own_users_interventions(client, world, rt, clock):
    _track(client, world, [{"user_id": "u2", "event": "$identify"}])
    pid = _playbook(client, world, EXIT)
    first, second = _delivered(client, rt, world, pid), _delivered(client, rt, world, pid, user="u2")
    _track(client, world, [{"user_id": "u2", "event": "report_created"}])
    assert (_row(rt, world, first).outcome, _row(rt, world, second).outcome) == (None, "positive")


def test_a_window_closing_with_neither_makes_it_neutral(client, world, rt, clock):
    pid = _playbook(client, world, {**EXIT, "attribution_days": 3})
    iv = _delivered(client, rt, world, pid)
    clock.advance(days=2, hours=23)
    _track(client, world, [{"user_id": "u1", "event": "viewed"}])
    assert _sweep(rt, world) == 0
    clock.advance(hours=1)
    assert _sweep(rt, world) == 1
    assert _row(rt, world, iv).outcome == "neutral"
    assert [e["outcome"] for e in _events(rt, world, "outcome.recorded")] == ["neutral"]
    assert _success_rate(client, world, pid) == 0.0


def test_a_playbook_without_exit_conditions_is_never_positive(client, world, rt, clock):
    iv = _delivered(client, rt, world, _playbook(client, world, {}))
    _track(client, world, [{"user_id": "u1", "event": "report_created"}])
    assert _sweep(rt, world) == 0
    clock.advance(days=7)
    assert _sweep(rt, world) == 1 and _row(rt, world, iv).outcome == "neutral"


def test_the_sweep_job_is_scheduled_and_covers_every_tenant(client, world, rt, clock, make_tenant, receiver):
    assert "sweep_outcomes" in [p.name for p in registry.periodic()]
    other = make_tenant("Other", plan_tier="growth")
    _track(client, other, [{"user_id": "u1", "event": "$identify"}])
    client.post("/api/webhooks/endpoints", headers=auth(other.key), json={"url": receiver.url})
    ivs = [(t, _delivered(client, rt, t, _playbook(client, t, EXIT))) for t in (world, other)]
    clock.advance(days=7)
    broker = rt.install_broker()
    from dramatiq import Worker

    worker = Worker(broker, worker_threads=1)
    worker.start()
    try:
        actors.sweep_outcomes.send()
        deadline = Deadline(20)
        while any(_row(rt, t, iv).outcome is None for t, iv in ivs) and deadline:
            time.sleep(0.05)
    finally:
        worker.stop()
    assert [_row(rt, t, iv).outcome for t, iv in ivs] == ["neutral", "neutral"]


def test_handling_an_escalation_with_an_outcome_records_it(client, world, rt):
    pid = _playbook(client, world)
    h = auth(world.key)
    esc = client.post("/api/escalations", headers=h, json={"user_id": "u1", "playbook_id": pid,
                                                          "severity": "High", "reason": "Churn risk"}).json["id"]
    resp = client.put(f"/api/escalations/{esc}/handle", headers=h, json={"action_taken": "called", "outcome": "positive"})
    assert resp.status_code == 200
    [recorded] = _events(rt, world, "outcome.recorded")
    assert recorded["intervention_id"] == esc and recorded["outcome"] == "positive" and recorded["channel"] == "escalate"


def test_exit_conditions_refuse_a_bad_attribution_window(client, world):
    for bad in (0, 366, 2.5, "7", True):
        resp = client.post("/api/playbooks", headers=auth(world.key),
                           json={"name": "x", "exit_conditions": {**EXIT, "attribution_days": bad}})
        assert resp.status_code == 400, bad
        assert resp.json["details"][0]["field"] == "exit_conditions.attribution_days"


# --- in-app clicks and dismissals -------------------------------------------------------------


def _stream_token(client, tenant, user="u1"):
    return client.post("/api/in-app/tokens", headers=auth(tenant.key), json={"user_id": user}).json["token"]


def _in_app_sent(client, rt, tenant, pid, user="u1") -> str:
    h = auth(tenant.key)
    iv = client.post("/api/interventions", headers=h, json={"user_id": user, "playbook_id": pid, "channel": "in_app",
                                                             "message_body": "Try reports"}).json["id"]
    client.put(f"/api/interventions/{iv}/approve", headers=h)
    _run_deliveries(rt, tenant)
    assert _row(rt, tenant, iv).status == "sent"         # queued on the stream, nobody connected
    return iv


def test_a_click_is_a_response_once(client, world, rt, clock):
    pid = _playbook(client, world, EXIT)
    iv = _in_app_sent(client, rt, world, pid)
    token = _stream_token(client, world)
    resp = client.post("/api/in-app/events", json={"token": token, "intervention_id": iv, "action": "clicked"})
    assert resp.status_code == 200 and resp.json == {"recorded": True, "intervention_id": iv, "action": "clicked"}
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    row = _row(rt, world, iv)
    assert row.status == "delivered" and row.responded_at == clock.now()    # a click proves it was shown
    again = client.post("/api/in-app/events", json={"token": token, "intervention_id": iv, "action": "clicked"})
    assert again.json["recorded"] is False
    [responded] = _events(rt, world, "user.responded")
    assert responded["response"] == "clicked" and responded["intervention_id"] == iv and responded["event_name"] is None


def test_a_dismissal_opts_the_user_out_of_in_app_messages(client, world, rt):
    pid = _playbook(client, world)
    iv = _in_app_sent(client, rt, world, pid)
    token = _stream_token(client, world)
    resp = client.post("/api/in-app/events", json={"token": token, "intervention_id": iv, "action": "dismissed"})
    assert resp.status_code == 200 and resp.json["recorded"] is True
    [opted] = _events(rt, world, "user.opted_out")
    assert opted["user_id"] == "u1" and opted["channel"] == "in_app"
    again = client.post("/api/in-app/events", json={"token": token, "intervention_id": iv, "action": "dismissed"})
    assert again.json["recorded"] is False and len(_events(rt, world, "user.opted_out")) == 1
    client.put(f"/api/playbooks/{pid}/status", headers=auth(world.key), json={"status": "active"})
    client.put(f"/api/playbooks/{pid}", headers=auth(world.key),
               json={"constraints": {"channels": ["in_app"]}})
    decision = client.post("/api/interventions/dry-run", headers=auth(world.key), json={"user_id": "u1"}).json
    assert decision["decision"]["action"] == "none" and "opted out" in decision["decision"]["reason"]


def test_in_app_reports_are_refused_clearly_and_change_nothing(client, world, rt, make_tenant):
    pid = _playbook(client, world)
    iv = _in_app_sent(client, rt, world, pid)
    _track(client, world, [{"user_id": "u2", "event": "$identify"}])
    webhook_iv = _delivered(client, rt, world, pid)
    other = make_tenant("Other")
    _track(client, other, [{"user_id": "u1", "event": "$identify"}])
    planned = client.post("/api/interventions", headers=auth(world.key), json={
        "user_id": "u1", "playbook_id": pid, "channel": "in_app", "message_body": "later"}).json["id"]
    token = _stream_token(client, world)
    cases = [
        ({"token": "forged.token", "intervention_id": iv, "action": "clicked"}, 401, "unauthorized"),
        ({"token": _stream_token(client, world, "u2"), "intervention_id": iv, "action": "clicked"}, 404, "not_found"),
        ({"token": _stream_token(client, other), "intervention_id": iv, "action": "clicked"}, 404, "not_found"),
        ({"token": token, "intervention_id": webhook_iv, "action": "clicked"}, 404, "not_found"),
        ({"token": token, "intervention_id": planned, "action": "clicked"}, 409, "invalid_state"),
        ({"token": token, "intervention_id": iv, "action": "liked"}, 400, "validation_failed"),
        ({"token": token, "action": "clicked"}, 400, "validation_failed"),
    ]
    for body, status, code in cases:
        resp = client.post("/api/in-app/events", json=body)
        assert resp.status_code == status and resp.json["code"] == code, (body, resp.json)
    assert _row(rt, world, iv).responded_at is None and _row(rt, world, iv).status == "sent"
    assert _events(rt, world, "user.responded") == _events(rt, world, "user.opted_out") == []


def test_a_browser_may_report_from_another_origin(client):
    resp = client.options("/api/in-app/events", headers={"Origin": "https://shop.example",
                                                          "Access-Control-Request-Method": "POST",
                                                          "Access-Control-Request-Headers": "content-type"})
    assert resp.status_code == 200
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert "Content-Type" in resp.headers["Access-Control-Allow-Headers"]
