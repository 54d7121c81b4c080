"""Engine decisions that are not dry runs: triggers after ingest, approval modes, shadow
mode, kill switch, escalations, the decision sweep, and the AI writer (docs/decisions.md, docs/ai.md)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from cs_daemon.decisions import requests
from cs_daemon.decisions.models import DecisionRequest
from cs_daemon.interventions.models import Intervention
from cs_daemon.outbox.models import OutboxEvent
from cs_daemon.runtime import Runtime
from tests.conftest import NO_HOLDOUT, auth
from tests.support.openai_server import OpenAIServer, model_answer


@pytest.fixture
def tenant(make_tenant):
    return make_tenant(config=dict(NO_HOLDOUT))


def _playbook(client, tenant, name="welcome", **body):
    h = auth(tenant.key)
    body.setdefault("entry_conditions", {"trigger": {"event": "signed_up"}})
    pid = client.post("/api/playbooks", headers=h, json={"name": name, **body}).json["id"]
    client.put(f"/api/playbooks/{pid}/status", headers=h, json={"status": "active"})
    return pid


def _signup(client, tenant, user="u1", email="u1@x.io"):
    resp = client.post("/api/track", headers=auth(tenant.key), json={"events": [
        {"user_id": user, "event": "$identify", "properties": {"email": email, "name": "Ada"}},
        {"user_id": user, "event": "signed_up"}]})
    assert resp.status_code == 200


def _owed(rt, tenant):
    with rt.session(tenant.id) as s:
        return list(s.scalars(select(DecisionRequest).order_by(DecisionRequest.created_at)))


def _decide_owed(rt, tenant):
    for request in _owed(rt, tenant):
        requests.process(rt, request.id)


def _interventions(rt, tenant):
    with rt.session(tenant.id) as s:
        return list(s.scalars(select(Intervention).order_by(Intervention.planned_at)))


def _outbox(rt, tenant, kind):
    with rt.session(tenant.id) as s:
        return [o.payload for o in s.scalars(select(OutboxEvent).where(OutboxEvent.event_type == kind))]


def _config(client, tenant, **config):
    assert client.patch("/api/settings", headers=auth(tenant.key), json={"config": config}).status_code == 200


def test_a_trigger_event_owes_a_decision_that_becomes_a_planned_intervention(client, tenant, rt):
    pid = _playbook(client, tenant, strategy_hints={"goal": "create a first project", "preferred_channel": "email"})
    _signup(client, tenant)
    [owed] = _owed(rt, tenant)
    assert owed.user_id == "u1" and "signed_up" in owed.events and owed.done_at is None
    _decide_owed(rt, tenant)
    [iv] = _interventions(rt, tenant)
    assert (iv.user_id, iv.playbook_id, iv.channel, iv.status, iv.source) == ("u1", pid, "email", "planned", "engine")
    assert iv.message_body and "Ada" in iv.message_body and iv.reasoning and iv.confidence
    assert [c["check"] for c in iv.quality_checks] and all(c["passed"] for c in iv.quality_checks)
    [rec] = _outbox(rt, tenant, "decision.recommended")
    assert rec["intervention_id"] == iv.id and rec["action"] == "send" and rec["playbook_id"] == pid
    assert rec["decision_id"] == iv.decision_id and 0 < rec["propensity"] <= 1   # the learner drew the channel
    assert _owed(rt, tenant)[0].done_at is not None
    _decide_owed(rt, tenant)                     # a second run of the same request does nothing
    assert len(_interventions(rt, tenant)) == 1


def test_no_active_playbook_owes_nothing(client, tenant, rt):
    _signup(client, tenant)
    assert _owed(rt, tenant) == []


@pytest.mark.parametrize("config, constraints, expected", [
    ({}, {}, "planned"),                                                    # suggest_only by default
    ({"approvalMode": "full_auto"}, {}, "approved"),
    ({"approvalMode": "full_auto"}, {"require_approval": True}, "planned"),
    ({"approvalMode": "semi_auto", "auto_approve_min_confidence": 0.5}, {}, "approved"),
    ({"approvalMode": "semi_auto", "auto_approve_min_confidence": 0.95}, {}, "planned"),
])
def test_approval_modes(client, tenant, rt, config, constraints, expected):
    _config(client, tenant, **config)
    _playbook(client, tenant, constraints=constraints)
    _signup(client, tenant)
    _decide_owed(rt, tenant)
    [iv] = _interventions(rt, tenant)
    assert iv.status == expected
    assert (iv.approved_at is not None) == (expected == "approved")


def test_shadow_mode_records_shadow_interventions(client, tenant, rt):
    client.put("/api/settings/shadow-mode", headers=auth(tenant.key), json={"active": True})
    _config(client, tenant, approvalMode="full_auto")
    _playbook(client, tenant)
    _signup(client, tenant)
    _decide_owed(rt, tenant)
    assert [iv.status for iv in _interventions(rt, tenant)] == ["shadow"]


def test_kill_switch_creates_no_interventions(client, tenant, rt):
    client.put("/api/settings/kill-switch", headers=auth(tenant.key), json={"active": True})
    _playbook(client, tenant)
    _signup(client, tenant)
    _decide_owed(rt, tenant)
    assert _interventions(rt, tenant) == []
    assert _owed(rt, tenant)[0].done_at is not None


def test_escalation_playbook_opens_an_escalation(client, tenant, rt):
    pid = _playbook(client, tenant, strategy_hints={"escalate": {"severity": "High"}, "goal": "call them"})
    _signup(client, tenant)
    _decide_owed(rt, tenant)
    [iv] = _interventions(rt, tenant)
    assert (iv.channel, iv.status, iv.severity, iv.suggested_action) == ("escalate", "open", "High", "call them")
    [esc] = _outbox(rt, tenant, "intervention.escalated")
    assert esc["intervention_id"] == iv.id and esc["playbook_id"] == pid and esc["reason"]


def test_lost_decision_jobs_are_found_by_the_sweep(client, tenant, rt, clock):
    _playbook(client, tenant)
    _signup(client, tenant)
    with rt.session() as s:
        assert requests.overdue(s, clock.now()) == []
    clock.advance(seconds=31)
    with rt.session() as s:
        [owed_id] = requests.overdue(s, clock.now())
    requests.process(rt, owed_id)
    assert len(_interventions(rt, tenant)) == 1


def test_the_sweep_decides_for_untriggered_playbooks_once_per_user(client, tenant, rt):
    pid = _playbook(client, tenant, "pros", entry_conditions={"field": "traits.plan", "op": "eq", "value": "pro"})
    client.post("/api/track", headers=auth(tenant.key), json={"events": [
        {"user_id": "a", "event": "$identify", "properties": {"plan": "pro", "email": "a@x.io"}},
        {"user_id": "b", "event": "$identify", "properties": {"plan": "free", "email": "b@x.io"}}]})
    for _ in range(2):
        with rt.session(tenant.id) as s:
            for user_id in requests.sweep_candidates(s, rt.now()):
                requests.decide_for(rt, tenant.id, user_id)
    assert [(iv.user_id, iv.playbook_id) for iv in _interventions(rt, tenant)] == [("a", pid)]


def test_the_decide_job_runs_on_the_worker(client, tenant, rt):
    import time

    _playbook(client, tenant)
    rt.start_worker()
    try:
        _signup(client, tenant)
        deadline = time.monotonic() + 20
        while not _interventions(rt, tenant) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        rt.stop_worker()
    assert len(_interventions(rt, tenant)) == 1


# -- the AI writer against an OpenAI-compatible server on loopback ------------------------

@pytest.fixture
def model():
    server = OpenAIServer()
    yield server
    server.close()


def _ai_runtime(settings, clock, model):
    return Runtime(settings.model_copy(update={"openai_base_url": model.base_url, "openai_model": model.model,
                                               "openai_api_key": "sk-test"}), clock)


def test_a_good_model_answer_becomes_the_message(client, tenant, settings, clock, model):
    model.script = [model_answer("Ada, your first project takes two minutes.", "She signed up but built nothing.")]
    _config(client, tenant, approvalMode="full_auto", ai_decisions=False)   # the writer alone (the agent: test_agent.py)
    _playbook(client, tenant, strategy_hints={"goal": "first project"})
    _signup(client, tenant)
    _decide_owed(_ai_runtime(settings, clock, model), tenant)
    [iv] = _interventions(Runtime(settings, clock), tenant)
    assert iv.message_body == "Ada, your first project takes two minutes."
    assert iv.reasoning == "She signed up but built nothing." and iv.status == "approved"


def test_a_message_with_a_phrase_to_avoid_is_not_auto_approved(client, tenant, settings, clock, model):
    model.script = [model_answer("Act now, this cheap offer ends soon.", "Urgency works.")]
    client.patch("/api/settings/brand", headers=auth(tenant.key), json={"things_to_avoid": ["cheap"]})
    _config(client, tenant, approvalMode="full_auto")
    _playbook(client, tenant)
    _signup(client, tenant)
    _decide_owed(_ai_runtime(settings, clock, model), tenant)
    [iv] = _interventions(Runtime(settings, clock), tenant)
    assert iv.status == "planned"
    failed = [c for c in iv.quality_checks if not c["passed"]]
    assert [c["check"] for c in failed] == ["things_to_avoid"]


def test_a_failing_model_falls_back_to_the_template_and_says_so(client, tenant, settings, clock, model):
    from tests.support.openai_server import Reply

    model.script = [Reply(status=500)]
    _playbook(client, tenant, strategy_hints={"message_template": "Hi {{name}}, welcome aboard."})
    _signup(client, tenant)
    _decide_owed(_ai_runtime(settings, clock, model), tenant)
    [iv] = _interventions(Runtime(settings, clock), tenant)
    assert iv.message_body == "Hi Ada, welcome aboard."
    assert "AI writer unavailable" in iv.reasoning


def test_a_decision_recorded_while_another_was_being_written_keeps_max_per_user(client, tenant, rt, monkeypatch):
    """Two decisions for one user (a sweep and an event, two worker threads) are proposed
    without a lock; the second to record sees the first and stops at max_per_user."""
    from cs_daemon.decisions import record as recording

    _playbook(client, tenant, constraints={"max_per_user": 1})
    _signup(client, tenant)
    real, raced = recording.propose, []

    def propose_while_another_records(*args, **kwargs):
        proposal = real(*args, **kwargs)
        if not raced:
            raced.append(True)
            requests.decide_for(rt, tenant.id, "u1", events=["signed_up"])   # the other one wins
        return proposal

    monkeypatch.setattr(recording, "propose", propose_while_another_records)
    assert requests.decide_for(rt, tenant.id, "u1", events=["signed_up"]) is None
    assert raced and len(_interventions(rt, tenant)) == 1
    assert len(_outbox(rt, tenant, "decision.recommended")) == 1


@pytest.mark.parametrize("backend", ["postgres"])   # SQLite's write lock is the whole database's
def test_a_held_user_makes_a_second_recorder_wait(client, tenant, rt, backend):
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    _signup(client, tenant)
    with rt.session(tenant.id) as first:
        requests.hold_user(first, tenant.id, "u1")
        with rt.session(tenant.id) as second:
            second.execute(text("SET LOCAL lock_timeout = '200ms'"))
            requests.hold_user(second, tenant.id, "u2")          # another user is free
            with pytest.raises(OperationalError, match="lock timeout"):
                requests.hold_user(second, tenant.id, "u1")
