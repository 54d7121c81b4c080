"""Periodic sweeps run each tenant in its own transaction and error boundary
(cs_daemon/jobs/sweeps.py): one tenant's failure is recorded, shown on /api/health and
cleared when its sweep succeeds again, and every other tenant's work is done. A decision
request that keeps failing backs off and ends failed. The decision sweep decides through
decision requests, like ingest (docs/decisions.md, "When")."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import redis
from sqlalchemy import select, update

from cs_daemon.customers import actors as customer_jobs
from cs_daemon.customers.models import Customer
from cs_daemon.decisions import actors as decision_jobs
from cs_daemon.decisions import requests
from cs_daemon.decisions.models import DecisionRequest
from cs_daemon.external.models import ExternalAction
from cs_daemon.interventions import actors as intervention_jobs
from cs_daemon.interventions.models import Intervention
from cs_daemon import ops_state
from cs_daemon.jobs import heartbeat, sweeps
from cs_daemon.runtime import Runtime
from cs_daemon.playbooks.models import Playbook
from cs_daemon.tenants import actors as tenant_jobs
from cs_daemon.tenants.models import Tenant
from tests.conftest import NO_HOLDOUT, REDIS, auth


@pytest.fixture
def jobs(rt):
    """Jobs of this runtime run in this process when called."""
    rt.install_broker()
    heartbeat.beat(rt.cache)
    return rt


def _track(client, tenant, *events):
    resp = client.post("/api/track", headers=auth(tenant.key), json={"events": list(events)})
    assert resp.status_code == 200, resp.json


def _stage(rt, tenant, user) -> str:
    with rt.session(tenant.id) as s:
        return s.get(Customer, (tenant.id, user)).lifecycle_stage


def _sweeps_check(client) -> dict:
    resp = client.get("/api/health")
    return resp.json["checks"]["sweeps"]


def _corrupt_state(rt, tenant, user):
    """A user whose stored scoring state cannot be read (written straight into the row)."""
    with rt.session(tenant.id) as s:
        s.execute(update(Customer).where(Customer.tenant_id == tenant.id, Customer.id == user)
                  .values(state={"first_seen_at": "garbage"}, scored_at=None))


def test_a_failing_tenant_is_recorded_and_the_next_tenant_is_swept(client, make_tenant, jobs, clock):
    bad, good = make_tenant("Bad"), make_tenant("Good")          # the bad one is swept first
    for t in (bad, good):
        _track(client, t, {"user_id": "u1", "event": "viewed"}, {"user_id": "u2", "event": "viewed"})
    _corrupt_state(jobs, bad, "u1")
    clock.advance(days=31)
    customer_jobs.sweep_scores()
    assert _stage(jobs, good, "u1") == _stage(jobs, good, "u2") == "churned"
    assert _stage(jobs, bad, "u2") != "churned"                   # its transaction was rolled back whole
    check = _sweeps_check(client)
    assert check["status"] == "degraded" and check["failing"] == 1
    [failure] = check["failures"]
    assert failure["sweep"] == "sweep_scores" and failure["tenant_id"] == bad.id and failure["count"] == 1
    assert failure["error"].startswith("ValueError") and failure["at"] == clock.now().isoformat()
    resp = client.get("/api/health")
    assert resp.status_code == 200 and resp.json["status"] == "ok"    # a tenant's failure is no outage

    clock.advance(minutes=5)
    customer_jobs.sweep_scores()                                  # fails again: counted
    [failure] = _sweeps_check(client)["failures"]
    assert failure["count"] == 2 and failure["at"] == clock.now().isoformat()

    with jobs.session(bad.id) as s:                               # repaired: the next run clears it
        s.execute(update(Customer).where(Customer.id == "u1").values(state={}))
    customer_jobs.sweep_scores()
    assert _stage(jobs, bad, "u2") == "churned"
    check = _sweeps_check(client)
    assert (check["status"], check["failing"], check["failures"]) == ("ok", 0, [])


def test_failures_live_in_the_shared_cache_and_are_forgotten_after_an_hour(client, make_tenant, jobs, clock,
                                                                          settings):
    bad = make_tenant("Bad")
    _track(client, bad, {"user_id": "u1", "event": "viewed"})
    _corrupt_state(jobs, bad, "u1")
    customer_jobs.sweep_scores()
    if settings.redis_url:                                        # every process reads them from Redis
        stored = redis.Redis.from_url(REDIS).hgetall(f"{settings.cs_redis_prefix}:{sweeps.FAILURES_KEY}")
        [(name, raw)] = stored.items()
        assert name.decode() == f"sweep_scores:{bad.id}" and json.loads(raw)["tenant_id"] == bad.id
    assert _sweeps_check(client)["failing"] == 1
    # another process (`cs status`) reads them too; in the embedded mode the daemon's memory was not shared
    [seen] = sweeps.failures(Runtime(settings, clock), clock.now())
    assert (seen["sweep"], seen["tenant_id"]) == ("sweep_scores", bad.id)
    clock.advance(minutes=61)                                     # no longer swept (e.g. deleted): forgotten
    assert _sweeps_check(client)["failing"] == 0
    assert ops_state.read(jobs, sweeps.FAILURES_KEY) == {}


def test_the_boundary_records_each_failing_tenant_and_goes_on(rt, clock):
    done = []

    def work(tenant_id):
        if tenant_id.startswith("bad"):
            raise RuntimeError(f"{tenant_id} broke\nsecond line not shown")
        done.append(tenant_id)
        return 2

    tally = sweeps.for_each_tenant(rt, "probe", ["bad-1", "good-1", "bad-2", "good-2"], work)
    assert (tally.tenants, tally.done, tally.failed) == (4, 4, ["bad-1", "bad-2"])
    assert done == ["good-1", "good-2"]
    found = sweeps.failures(rt, clock.now())
    assert [(f["tenant_id"], f["error"], f["count"]) for f in sorted(found, key=lambda f: f["tenant_id"])] == [
        ("bad-1", "RuntimeError (the worker's log has the details)", 1),
        ("bad-2", "RuntimeError (the worker's log has the details)", 1)]   # the text may hold stored data
    skipped = sweeps.SkippedStoredData("playbook p: entry_conditions")
    sweeps.for_each_tenant(rt, "probe", ["bad-1", "bad-2"],
                           lambda t: (_ for _ in ()).throw(skipped) if t == "bad-2" else 1)
    [left] = sweeps.failures(rt, clock.now())
    assert (left["tenant_id"], left["error"], left["count"]) == (
        "bad-2", "SkippedStoredData: playbook p: entry_conditions", 2)


# -- stored playbooks that no longer validate ---------------------------------------------

def _active_playbook(client, tenant, name, **body) -> str:
    h = auth(tenant.key)
    resp = client.post("/api/playbooks", headers=h, json={"name": name, **body})
    assert resp.status_code == 201, resp.json
    client.put(f"/api/playbooks/{resp.json['id']}/status", headers=h, json={"status": "active"})
    return resp.json["id"]


def _store(rt, tenant, playbook_id, **fields):
    """Write playbook fields straight through the model, past the API's checks."""
    with rt.session(tenant.id) as s:
        playbook = s.get(Playbook, playbook_id)
        for name, value in fields.items():
            setattr(playbook, name, value)


def _nested(depth: int) -> dict:
    tree = {"event": "x", "within_days": 1e6}
    for _ in range(depth):
        tree = {"not": tree}
    return tree


def _interventions(rt, tenant) -> list[Intervention]:
    with rt.session(tenant.id) as s:
        return list(s.scalars(select(Intervention).order_by(Intervention.planned_at)))


def test_the_decision_sweep_skips_a_stored_playbook_that_no_longer_validates(client, tenant, jobs):
    _track(client, tenant, {"user_id": "u1", "event": "$identify", "properties": {"plan": "pro", "email": "a@x.io"}})
    good = _active_playbook(client, tenant, "pros", entry_conditions={"field": "traits.plan", "op": "eq",
                                                                       "value": "pro"})
    broken = _active_playbook(client, tenant, "huge", entry_conditions={"field": "traits.plan", "op": "exists",
                                                                         "value": True})
    _store(jobs, tenant, broken, entry_conditions=_nested(40), constraints={"cooldown_hours": "x"})
    decision_jobs.sweep_decisions()
    assert [(iv.user_id, iv.playbook_id) for iv in _interventions(jobs, tenant)] == [("u1", good)]
    [failure] = _sweeps_check(client)["failures"]
    assert failure["sweep"] == "sweep_decisions" and failure["tenant_id"] == tenant.id
    assert f"playbook {broken}: entry_conditions.not" in failure["error"] and "cs doctor" in failure["error"]
    resp = client.post("/api/interventions/dry-run", headers=auth(tenant.key), json={"user_id": "u1"})
    assert resp.status_code == 200                                 # a dry run leaves it out too


def test_outcomes_of_a_playbook_with_broken_exit_conditions_wait_until_it_is_fixed(client, make_tenant, jobs,
                                                                                    clock, receiver):
    tenant = make_tenant("Crew", plan_tier="growth")
    h = auth(tenant.key)
    _track(client, tenant, {"user_id": "u1", "event": "viewed"})
    client.post("/api/webhooks/endpoints", headers=h, json={"url": receiver.url})
    exit_ = {"event": "report_created"}
    ivs = {}
    for name in ("kept", "broken"):
        pid = client.post("/api/playbooks", headers=h, json={"name": name, "exit_conditions": exit_}).json["id"]
        iv = client.post("/api/interventions", headers=h, json={"user_id": "u1", "playbook_id": pid,
                                                                "channel": "webhook", "message_body": "hi"}).json["id"]
        client.put(f"/api/interventions/{iv}/approve", headers=h)
        ivs[name] = (pid, iv)
    from cs_daemon.delivery import service as delivery
    from cs_daemon.delivery.models import Delivery

    with jobs.session(tenant.id) as s:
        due = [d.id for d in s.scalars(select(Delivery).where(Delivery.status == "pending"))]
    for delivery_id in due:
        delivery.attempt(jobs, delivery_id)
    _store(jobs, tenant, ivs["broken"][0], exit_conditions={"event": "report_created", "within_days": 1e6})
    clock.advance(days=8)
    intervention_jobs.sweep_outcomes()
    with jobs.session(tenant.id) as s:
        outcome = {name: s.get(Intervention, iv).outcome for name, (_, iv) in ivs.items()}
    assert outcome == {"kept": "neutral", "broken": None}
    [failure] = _sweeps_check(client)["failures"]
    assert failure["sweep"] == "sweep_outcomes" and f"playbook {ivs['broken'][0]}: exit_conditions" in failure["error"]

    resp = client.put(f"/api/playbooks/{ivs['broken'][0]}", headers=h, json={"exit_conditions": exit_})
    assert resp.status_code == 200
    intervention_jobs.sweep_outcomes()
    with jobs.session(tenant.id) as s:
        assert s.get(Intervention, ivs["broken"][1]).outcome == "neutral"
    assert _sweeps_check(client)["failing"] == 0


# -- expiries -----------------------------------------------------------------------------

def test_the_expiry_sweep_ends_shadow_mode_and_expires_actions_tenant_by_tenant(client, make_tenant, jobs, clock):
    odd, good = make_tenant("Odd"), make_tenant("Good")
    for t in (odd, good):
        assert client.put("/api/settings/shadow-mode", headers=auth(t.key), json={"active": True}).status_code == 200
        with jobs.session(t.id) as s:
            s.add(ExternalAction(action_type="award_points", user_id="u1", status="delivered", parameters={},
                                 created_at=clock.now(), delivered_at=clock.now()))
    with jobs.session() as s:                                     # an expiry stored unreadable
        s.execute(update(Tenant).where(Tenant.id == odd.id).values(config={"shadow_mode_expires_at": "soon"}))
    clock.advance(hours=73)
    tenant_jobs.sweep_expiries()
    with jobs.session() as s:
        assert s.get(Tenant, good.id).shadow_mode is False
        assert s.get(Tenant, odd.id).shadow_mode is True           # kept on: nothing leaves by mistake
    clock.advance(days=7)
    tenant_jobs.sweep_expiries()
    for t in (odd, good):
        with jobs.session(t.id) as s:
            assert [a.status for a in s.scalars(select(ExternalAction))] == ["expired"]
    assert _sweeps_check(client)["failing"] == 0


# -- owed decisions that keep failing -----------------------------------------------------

class _BrokenWriter:
    """The message writer (the seam to the model) failing on every call."""

    def write(self, **_):
        raise RuntimeError("the writer broke")


def test_a_decision_that_keeps_failing_backs_off_and_ends_failed(client, tenant, jobs, clock):
    _active_playbook(client, tenant, "welcome", entry_conditions={"trigger": {"event": "signed_up"}},
                     strategy_hints={"preferred_channel": "email"})
    jobs._writer = _BrokenWriter()
    _track(client, tenant, {"user_id": "u1", "event": "$identify", "properties": {"email": "u1@x.io"}},
           {"user_id": "u1", "event": "signed_up"})
    with jobs.session(tenant.id) as s:
        [request_id] = s.scalars(select(DecisionRequest.id)).all()
    waits = []
    for attempt in range(1, requests.MAX_ATTEMPTS + 1):
        clock.advance(seconds=31)
        with jobs.session() as s:
            assert requests.overdue(s, clock.now()) == [request_id]
        requests.process(jobs, request_id)
        with jobs.session() as s:
            row = s.get(DecisionRequest, request_id)
            assert row.attempts == attempt and row.last_error == "RuntimeError: the writer broke"
            if attempt < requests.MAX_ATTEMPTS:
                assert row.failed_at is None and requests.overdue(s, clock.now()) == []
                waits.append(row.claimed_until - clock.now())
                clock.advance(seconds=(row.claimed_until - clock.now()).total_seconds() - 31)
    assert waits == [timedelta(seconds=30), timedelta(minutes=1), timedelta(minutes=2), timedelta(minutes=4)]
    with jobs.session() as s:
        row = s.get(DecisionRequest, request_id)
        assert row.failed_at == clock.now() and row.done_at is None
    clock.advance(days=1)
    with jobs.session() as s:
        assert requests.overdue(s, clock.now()) == []              # never again on the recovery list
    requests.process(jobs, request_id)
    with jobs.session() as s:
        assert s.get(DecisionRequest, request_id).attempts == requests.MAX_ATTEMPTS
    assert _interventions(jobs, tenant) == []


def test_tries_that_never_finish_count_too(client, tenant, jobs, clock):
    _active_playbook(client, tenant, "welcome", entry_conditions={"trigger": {"event": "signed_up"}})
    _track(client, tenant, {"user_id": "u1", "event": "signed_up"})
    with jobs.session(tenant.id) as s:
        [request_id] = s.scalars(select(DecisionRequest.id)).all()
    for _ in range(requests.MAX_ATTEMPTS):                         # claimed, then the process died
        with jobs.session() as s:
            assert requests.claim(s, request_id, clock.now()) is not None
        clock.advance(seconds=requests.LEASE.total_seconds())
    requests.process(jobs, request_id)
    with jobs.session() as s:
        row = s.get(DecisionRequest, request_id)
        assert row.failed_at is not None and "did not finish" in row.last_error
    assert _interventions(jobs, tenant) == []


def test_one_failing_request_does_not_stop_the_others_of_its_job(client, make_tenant, jobs):
    broken, fine = make_tenant("Broken"), make_tenant("Fine")
    for t in (broken, fine):
        _active_playbook(client, t, "welcome", entry_conditions={"trigger": {"event": "signed_up"}},
                         strategy_hints={"preferred_channel": "in_app"})
        _track(client, t, {"user_id": "u1", "event": "signed_up"})
    with jobs.session() as s:
        ids = {r.tenant_id: r.id for r in s.scalars(select(DecisionRequest))}
    with jobs.session() as s:                                      # a row the engine cannot read
        s.execute(update(Customer).where(Customer.tenant_id == broken.id).values(opted_out=7))
    decision_jobs.decide_owed([ids[broken.id], ids[fine.id]])
    assert len(_interventions(jobs, fine)) == 1
    with jobs.session() as s:
        assert s.get(DecisionRequest, ids[broken.id]).attempts == 1
        assert s.get(DecisionRequest, ids[broken.id]).last_error.startswith("TypeError")


def _swept(rt, tenant, ingested: set[str]) -> list[DecisionRequest]:
    """The decision requests the sweep wrote (not those ingest owed)."""
    with rt.session(tenant.id) as s:
        return list(s.scalars(select(DecisionRequest).where(DecisionRequest.id.not_in(ingested))
                              .order_by(DecisionRequest.user_id)))


def test_the_decision_sweep_owes_requests_and_a_failing_one_is_retried_not_doubled(client, make_tenant, jobs,
                                                                                    clock):
    tenant = make_tenant(config=dict(NO_HOLDOUT))
    _active_playbook(client, tenant, "pros", entry_conditions={"field": "traits.plan", "op": "eq", "value": "pro"},
                     strategy_hints={"preferred_channel": "in_app"})
    _track(client, tenant, *({"user_id": u, "event": "$identify", "properties": {"plan": "pro", "email": f"{u}@x.io"}}
                             for u in ("u1", "u2")))
    with jobs.session(tenant.id) as s:
        ingested = set(s.scalars(select(DecisionRequest.id)))        # left to their job, which is not run here
        s.execute(update(Customer).where(Customer.id == "u1").values(opted_out=7))   # a row the engine cannot read
    decision_jobs.sweep_decisions()
    assert [iv.user_id for iv in _interventions(jobs, tenant)] == ["u2"]      # the other user is still decided
    [failure] = _sweeps_check(client)["failures"]
    assert (failure["sweep"], failure["tenant_id"]) == ("sweep_decisions", tenant.id)
    first, second = _swept(jobs, tenant, ingested)
    assert (first.user_id, first.events, first.test, first.attempts, first.done_at) == ("u1", [], False, 1, None)
    assert first.last_error.startswith("TypeError") and first.claimed_until > clock.now()     # backing off
    assert (second.user_id, second.events, second.done_at) == ("u2", [], clock.now())

    clock.advance(seconds=5)
    decision_jobs.sweep_decisions()                                   # u1's request is still open: no second one
    assert [r.user_id for r in _swept(jobs, tenant, ingested)] == ["u1", "u2", "u2"]
    with jobs.session(tenant.id) as s:                               # repaired: the overdue pass retries it
        s.execute(update(Customer).where(Customer.id == "u1").values(opted_out=False))
    clock.advance(seconds=60)
    with jobs.session() as s:
        assert first.id in requests.overdue(s, clock.now())
    requests.process(jobs, first.id)
    assert sorted(iv.user_id for iv in _interventions(jobs, tenant)) == ["u1", "u2"]
    assert _swept(jobs, tenant, ingested)[0].done_at == clock.now()


def test_the_trace_sweep_prunes_decision_requests_decided_more_than_a_day_ago(make_tenant, jobs, clock):
    tenant = make_tenant()
    now = clock.now()
    rows = {"old": now - timedelta(days=2), "recent": now - timedelta(hours=1), "open": None}
    with jobs.session(tenant.id) as s:
        for user, done_at in rows.items():
            s.add(DecisionRequest(tenant_id=tenant.id, user_id=user, created_at=now - timedelta(days=3),
                                  done_at=done_at))
        s.add(DecisionRequest(tenant_id=tenant.id, user_id="failed", created_at=now - timedelta(days=3),
                              failed_at=now - timedelta(days=2), attempts=6))
    decision_jobs.sweep_traces()
    with jobs.session(tenant.id) as s:
        assert sorted(s.scalars(select(DecisionRequest.user_id))) == ["failed", "open", "recent"]
