"""One contact policy over every playbook and channel (docs/decisions.md, "Contact
policy"): `config.contact_policy` caps how often the engine reaches one user, names the
rule that suppressed a decision, and offers the user again when the window frees."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

from cs_daemon.decisions import holdout, requests
from cs_daemon.interventions.models import Intervention
from tests.conftest import NO_HOLDOUT, auth

PRO = {"field": "traits.plan", "op": "eq", "value": "pro"}


def _tenant(make_tenant, **policy):
    return make_tenant(config={**NO_HOLDOUT, "contact_policy": policy})


def _playbook(client, tenant, name, entry=None, priority=0, **body):
    h = auth(tenant.key)
    body.setdefault("strategy_hints", {})
    body["strategy_hints"].setdefault("priority", priority)
    resp = client.post("/api/playbooks", headers=h, json={"name": name, "entry_conditions": entry or PRO, **body})
    assert resp.status_code == 201, resp.json
    client.put(f"/api/playbooks/{resp.json['id']}/status", headers=h, json={"status": "active"})
    return resp.json["id"]


def _user(client, tenant, user="u1", *events):
    resp = client.post("/api/track", headers=auth(tenant.key), json={"events": [
        {"user_id": user, "event": "$identify", "properties": {"email": f"{user}@x.io", "name": "Ada", "plan": "pro"}},
        *({"user_id": user, "event": e} for e in events)]})
    assert resp.status_code == 200, resp.json


def _sweep(rt, tenant):
    return requests.sweep_tenant(rt, tenant.id, rt.now())


def _interventions(rt, tenant):
    with rt.session(tenant.id) as s:
        return list(s.scalars(select(Intervention).order_by(Intervention.planned_at, Intervention.id)))


def _dry_run(client, tenant, user="u1"):
    resp = client.post("/api/interventions/dry-run", headers=auth(tenant.key), json={"user_id": user})
    assert resp.status_code == 200, resp.json
    return resp.json


def test_two_matching_playbooks_reach_a_user_once_a_day_and_the_second_names_the_rule(client, make_tenant, rt,
                                                                                       clock):
    tenant = _tenant(make_tenant, max_per_user_per_day=1)
    first = _playbook(client, tenant, "first", priority=2)
    second = _playbook(client, tenant, "second", priority=1)
    _user(client, tenant)
    assert _sweep(rt, tenant) == 1
    [iv] = _interventions(rt, tenant)
    assert (iv.playbook_id, iv.status) == (first, "planned")      # planned (waiting for approval) counts
    assert _sweep(rt, tenant) == 0
    assert requests.decide_for(rt, tenant.id, "u1") is None
    assert len(_interventions(rt, tenant)) == 1

    body = _dry_run(client, tenant)
    assert body["decision"]["action"] == "none"
    assert body["decision"]["reason"] == "contact_policy: max_per_user_per_day"
    verdict = body["rules"][second]
    assert (verdict["verdict"], verdict["why"]) == ("rejected", "contact_policy: max_per_user_per_day")
    assert verdict["contact_policy"]["free_at"] == (clock.now() + timedelta(hours=24)).isoformat()
    assert "max_per_user reached" in body["rules"][first]["why"]         # its own limit comes first

    clock.advance(hours=23, minutes=59)
    assert _sweep(rt, tenant) == 0
    clock.advance(minutes=1)                                               # the window frees
    assert _dry_run(client, tenant)["decision"]["playbook_id"] == second
    assert _sweep(rt, tenant) == 1
    assert [iv.playbook_id for iv in _interventions(rt, tenant)] == [first, second]


def test_event_triggered_decisions_obey_the_policy_too(client, make_tenant, rt):
    tenant = _tenant(make_tenant, max_per_user_per_day=1)
    welcome = _playbook(client, tenant, "welcome", {"trigger": {"event": "signed_up"}})
    _playbook(client, tenant, "tour", {"trigger": {"event": "opened_app"}})
    _user(client, tenant, "u1", "signed_up")
    assert requests.decide_for(rt, tenant.id, "u1", events=["signed_up"]) is not None
    assert requests.decide_for(rt, tenant.id, "u1", events=["opened_app"]) is None
    assert [iv.playbook_id for iv in _interventions(rt, tenant)] == [welcome]


def test_a_capped_channel_moves_the_next_message_to_another_usable_channel(client, make_tenant, rt, clock):
    tenant = _tenant(make_tenant, channels={"email": {"max_per_user_per_week": 1}})
    _playbook(client, tenant, "mail", priority=2, constraints={"channels": ["email"]})
    _playbook(client, tenant, "either", priority=1, constraints={"channels": ["email", "in_app"]},
              strategy_hints={"preferred_channel": "email"})
    _playbook(client, tenant, "mail-only", priority=0, constraints={"channels": ["email"]})
    _user(client, tenant)
    for _ in range(3):
        _sweep(rt, tenant)
        clock.advance(minutes=1)
    assert [iv.channel for iv in _interventions(rt, tenant)] == ["email", "in_app"]
    body = _dry_run(client, tenant)
    assert body["decision"]["reason"] == "contact_policy: channels.email.max_per_user_per_week"


def test_min_hours_between_spaces_contacts(client, make_tenant, rt, clock):
    tenant = _tenant(make_tenant, min_hours_between=48)
    _playbook(client, tenant, "a", priority=1)
    _playbook(client, tenant, "b")
    _user(client, tenant)
    assert _sweep(rt, tenant) == 1
    clock.advance(hours=47)
    assert _sweep(rt, tenant) == 0
    assert _dry_run(client, tenant)["decision"]["reason"] == "contact_policy: min_hours_between"
    clock.advance(hours=1)
    assert _sweep(rt, tenant) == 1


def test_the_week_cap_counts_every_channel(client, make_tenant, rt, clock):
    tenant = _tenant(make_tenant, max_per_user_per_week=2)
    for i, channel in enumerate(["webhook", "crm", "in_app"]):
        _playbook(client, tenant, f"p{i}", priority=3 - i, constraints={"channels": [channel]})
    _user(client, tenant)
    made = []
    for _ in range(3):
        made.append(_sweep(rt, tenant))
        clock.advance(days=1)
    assert made == [1, 1, 0]
    assert _dry_run(client, tenant)["decision"]["reason"] == "contact_policy: max_per_user_per_week"
    clock.advance(days=4)           # 7 days after the first contact
    assert _sweep(rt, tenant) == 1
    assert [iv.channel for iv in _interventions(rt, tenant)] == ["webhook", "crm", "in_app"]


def test_an_exempt_playbook_is_not_limited_but_its_messages_count(client, make_tenant, rt, clock):
    tenant = _tenant(make_tenant, max_per_user_per_day=1)
    exempt = _playbook(client, tenant, "receipt", priority=5)
    normal = _playbook(client, tenant, "nudge", priority=1)
    assert client.patch("/api/settings", headers=auth(tenant.key), json={"config": {"contact_policy": {
        "max_per_user_per_day": 1, "exempt_playbooks": [exempt]}}}).status_code == 200
    _user(client, tenant)
    assert _sweep(rt, tenant) == 1 and _sweep(rt, tenant) == 0     # the exempt one's message counts
    assert _dry_run(client, tenant)["rules"][normal]["why"] == "contact_policy: max_per_user_per_day"

    clock.advance(minutes=1)
    other = _playbook(client, tenant, "also-exempt", priority=0)      # exempt ones act under a full day
    assert client.patch("/api/settings", headers=auth(tenant.key), json={"config": {"contact_policy": {
        "max_per_user_per_day": 1, "exempt_playbooks": [exempt, other]}}}).status_code == 200
    assert _sweep(rt, tenant) == 1
    assert [iv.playbook_id for iv in _interventions(rt, tenant)] == [exempt, other]


@pytest.mark.parametrize("status, channel, counts", [
    ("planned", "email", True),
    ("approved", "in_app", True),
    ("sent", "webhook", True),
    ("delivered", "crm", True),
    ("open", "escalate", False),          # an escalation is to the team, not the user
    ("held_out", "email", False),         # the user is not held out (holdout 0): no contact
    ("shadow", "email", False),
    ("failed", "email", False),
    ("rejected", "email", False),
    ("rolled_back", "email", False),
])
def test_what_counts_as_a_contact(client, make_tenant, rt, status, channel, counts):
    tenant = _tenant(make_tenant, max_per_user_per_day=1)
    _playbook(client, tenant, "p")
    _user(client, tenant)
    with rt.session(tenant.id) as s:
        s.add(Intervention(tenant_id=tenant.id, user_id="u1", status=status, channel=channel, source="manual",
                           planned_at=rt.now(), updated_at=rt.now()))
    assert _sweep(rt, tenant) == (0 if counts else 1)


def test_escalations_are_neither_limited_nor_counted(client, make_tenant, rt, clock):
    tenant = _tenant(make_tenant, max_per_user_per_day=1)
    _playbook(client, tenant, "call", {"trigger": {"event": "cancel_clicked"}},
              strategy_hints={"escalate": {"severity": "High"}})
    _playbook(client, tenant, "nudge", priority=2)
    _playbook(client, tenant, "tip", priority=1)
    _user(client, tenant, "u1", "cancel_clicked")
    assert requests.decide_for(rt, tenant.id, "u1", events=["cancel_clicked"]).channel == "escalate"
    for _ in range(2):
        clock.advance(minutes=1)
        _sweep(rt, tenant)
    assert [iv.channel for iv in _interventions(rt, tenant)] == ["escalate", "email"]


def test_a_held_out_users_decisions_are_paced_by_the_policy_but_are_no_contact(client, make_tenant, rt, clock):
    tenant = make_tenant(config={"holdout_percent": 50, "contact_policy": {"max_per_user_per_day": 1}})
    user = next(u for u in (f"user-{i}" for i in range(100)) if holdout.held_out(tenant.id, u, 50))
    _playbook(client, tenant, "a", priority=2)
    _playbook(client, tenant, "b", priority=1)
    _user(client, tenant, user)
    for _ in range(2):
        _sweep(rt, tenant)
        clock.advance(minutes=1)
    assert [iv.status for iv in _interventions(rt, tenant)] == ["held_out"]    # one per contact it stands for
    assert client.patch("/api/settings", headers=auth(tenant.key),
                        json={"config": {"holdout_percent": 0}}).status_code == 200
    assert _sweep(rt, tenant) == 1                                             # released: no contact yet
    assert [iv.status for iv in _interventions(rt, tenant)] == ["held_out", "planned"]


def test_a_test_users_contacts_do_not_count_for_a_live_decision(client, make_tenant, rt):
    tenant = _tenant(make_tenant, max_per_user_per_day=1)
    _playbook(client, tenant, "p")
    _user(client, tenant)
    with rt.session(tenant.id) as s:
        s.add(Intervention(tenant_id=tenant.id, user_id="u1", status="sent", channel="email", test=True,
                           planned_at=rt.now(), updated_at=rt.now()))
    assert _sweep(rt, tenant) == 1


def test_a_decision_recorded_while_another_was_being_written_is_dropped(client, make_tenant, rt, monkeypatch):
    """Two decisions for one user by two playbooks (an event and the sweep) are proposed
    without a lock; the second to record sees the first and stops at the policy."""
    from cs_daemon.decisions import record as recording

    tenant = _tenant(make_tenant, max_per_user_per_day=1)
    welcome = _playbook(client, tenant, "welcome", {"trigger": {"event": "signed_up"}})
    _playbook(client, tenant, "sweep")
    _user(client, tenant, "u1", "signed_up")
    real, raced = recording.propose, []

    def propose_while_another_records(*args, **kwargs):
        proposal = real(*args, **kwargs)
        if not raced:
            raced.append(True)
            requests.decide_for(rt, tenant.id, "u1", events=["signed_up"])     # the other one wins
        return proposal

    monkeypatch.setattr(recording, "propose", propose_while_another_records)
    assert requests.decide_for(rt, tenant.id, "u1") is None
    assert raced and [iv.playbook_id for iv in _interventions(rt, tenant)] == [welcome]


@pytest.mark.parametrize("backend", ["postgres"])   # SQLite's write lock is the whole database's
def test_two_concurrent_decisions_for_one_user_record_one(client, make_tenant, rt, monkeypatch, backend):
    """Two worker threads decide for the same user at once, each for another playbook;
    both proposals are made before either records, and the user's lock lets one through."""
    from cs_daemon.decisions import record as recording

    tenant = _tenant(make_tenant, max_per_user_per_day=1)
    _playbook(client, tenant, "welcome", {"trigger": {"event": "signed_up"}})
    _playbook(client, tenant, "tour", {"trigger": {"event": "opened_app"}})
    _user(client, tenant, "u1")
    real, both_proposed = recording.propose, threading.Barrier(2, timeout=30)

    def propose_then_wait(*args, **kwargs):
        proposal = real(*args, **kwargs)
        both_proposed.wait()
        return proposal

    monkeypatch.setattr(recording, "propose", propose_then_wait)
    made, errors = [], []

    def decide(event):
        try:
            made.append(requests.decide_for(rt, tenant.id, "u1", events=[event]))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=decide, args=(e,)) for e in ("signed_up", "opened_app")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert sum(m is not None for m in made) == 1
    assert len(_interventions(rt, tenant)) == 1


BAD = [
    ({"max_per_user_per_day": "1"}, "config.contact_policy.max_per_user_per_day"),
    ({"max_per_user_per_day": -1}, "config.contact_policy.max_per_user_per_day"),
    ({"max_per_user_per_week": 1.5}, "config.contact_policy.max_per_user_per_week"),
    ({"min_hours_between": True}, "config.contact_policy.min_hours_between"),
    ({"min_hours_between": -2}, "config.contact_policy.min_hours_between"),
    ({"max_per_day": 1}, "config.contact_policy.max_per_day"),
    ({"channels": {"sms": {"max_per_user_per_day": 1}}}, "config.contact_policy.channels.sms"),
    ({"channels": {"email": {"max_per_user_per_dy": 1}}}, "config.contact_policy.channels.email.max_per_user_per_dy"),
    ({"channels": {"email": 1}}, "config.contact_policy.channels.email"),
    ({"exempt_playbooks": "p1"}, "config.contact_policy.exempt_playbooks"),
    ({"exempt_playbooks": [""]}, "config.contact_policy.exempt_playbooks[0]"),
]


@pytest.mark.parametrize("policy, field", BAD + [(3, "config.contact_policy")], ids=[f for _, f in BAD] + ["object"])
def test_an_invalid_policy_is_refused_naming_the_field_and_nothing_is_stored(client, tenant, policy, field):
    h = auth(tenant.key)
    before = client.get("/api/settings", headers=h).json["tenant"]
    resp = client.patch("/api/settings", headers=h, json={"config": {"contact_policy": policy}})
    assert resp.status_code == 400, resp.json
    assert resp.json["code"] == "validation_failed"
    assert field in [d["field"] for d in resp.json["details"]], resp.json["details"]
    assert client.get("/api/settings", headers=h).json["tenant"] == before


def test_a_valid_policy_is_stored_as_sent(client, tenant):
    policy = {"max_per_user_per_day": 1, "max_per_user_per_week": 3, "min_hours_between": 24,
              "channels": {"email": {"max_per_user_per_week": 2}, "crm": {"max_per_user_per_day": 1}},
              "exempt_playbooks": ["p1"]}
    resp = client.patch("/api/settings", headers=auth(tenant.key), json={"config": {"contact_policy": policy}})
    assert resp.status_code == 200, resp.json
    assert resp.json["config"]["contact_policy"] == policy
