"""Milestones configured after users did them count once the score sweep has re-read
them from the stored events (cs_daemon/customers/milestones.py; docs/scoring.md,
"Changing the milestones")."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from cs_daemon.customers import actors as customer_jobs
from cs_daemon.customers import milestones
from cs_daemon.jobs import heartbeat
from cs_daemon.outbox.models import OutboxEvent
from cs_daemon.tenants.models import Tenant
from tests.conftest import auth


@pytest.fixture
def jobs(rt):
    rt.install_broker()
    heartbeat.beat(rt.cache)
    return rt


def _track(client, tenant, user, *names):
    resp = client.post("/api/track", headers=auth(tenant.key),
                       json={"events": [{"user_id": user, "event": n} for n in names]})
    assert resp.status_code == 200, resp.json


def _customer(client, tenant, user) -> dict:
    resp = client.get(f"/api/customers/{user}", headers=auth(tenant.key))
    assert resp.status_code == 200, resp.json
    return resp.json["customer"]


def _stamp(rt, tenant):
    with rt.session() as s:
        return s.scalar(select(Tenant.milestones_changed_at).where(Tenant.id == tenant.id))


def _milestones(client, tenant, names):
    resp = client.patch("/api/settings", headers=auth(tenant.key), json={"config": {"milestones": names}})
    assert resp.status_code == 200, resp.json


def test_milestones_named_after_users_did_them_count_after_the_sweep(client, make_tenant, jobs, clock):
    tenant = make_tenant("Late")
    _track(client, tenant, "ada", "signed_up", "created_project")
    _track(client, tenant, "bob", "opened_app")
    assert _stamp(jobs, tenant) is None
    _milestones(client, tenant, ["signed_up", "created_project"])
    assert _stamp(jobs, tenant) is not None                # stamped with the change, in its transaction
    _track(client, tenant, "ada", "opened_app")            # before the sweep: the old record stands
    clock.advance(minutes=1)
    customer_jobs.sweep_scores()
    ada, bob = _customer(client, tenant, "ada"), _customer(client, tenant, "bob")
    got = {m["name"]: m["done"] for m in ada["milestone_progress"]["milestones"]}
    assert got == {"signed_up": True, "created_project": True}
    assert ada["activation_score"] == ada["milestone_progress"]["percent"] == 100.0
    assert bob["activation_score"] == bob["milestone_progress"]["percent"] == 0.0
    assert bob["milestone_progress"]["done"] == 0
    assert _stamp(jobs, tenant) is None                    # read: cleared
    # the same names again change nothing: no stamp, no re-read
    _milestones(client, tenant, ["created_project", "signed_up"])
    assert _stamp(jobs, tenant) is None


def test_a_change_during_the_re_read_is_read_again(client, make_tenant, jobs, clock, monkeypatch):
    tenant = make_tenant("Busy")
    _track(client, tenant, "ada", "signed_up", "invited_team")
    _milestones(client, tenant, ["signed_up"])
    real = milestones.refresh_batch

    def changed_meanwhile(session, tenant_id, rules, *, after, now):
        done = real(session, tenant_id, rules, after=after, now=now)
        clock.advance(seconds=1)
        _milestones(client, tenant, ["signed_up", "invited_team"])    # lands while the sweep reads
        return done
    monkeypatch.setattr(milestones, "refresh_batch", changed_meanwhile)
    customer_jobs.sweep_scores()
    assert _stamp(jobs, tenant) is not None                # not cleared: the newer change is still to read
    monkeypatch.setattr(milestones, "refresh_batch", real)
    customer_jobs.sweep_scores()
    assert _stamp(jobs, tenant) is None
    assert _customer(client, tenant, "ada")["milestone_progress"]["done"] == 2


def test_the_re_read_goes_through_every_user_in_batches_and_tells_stage_changes(client, make_tenant, jobs,
                                                                               monkeypatch):
    monkeypatch.setattr(milestones, "BATCH", 2)
    tenant = make_tenant("Many")
    for user in ("u1", "u2", "u3", "u4", "u5"):
        _track(client, tenant, user, "opened_app", *(["finished_setup"] if user in ("u2", "u5") else []))
    stages = {u: _customer(client, tenant, u)["lifecycle_stage"] for u in ("u1", "u2")}
    _milestones(client, tenant, ["finished_setup"])
    assert customer_jobs.sweep_scores() is None
    done = {u: _customer(client, tenant, u)["milestone_progress"]["done"] for u in ("u1", "u2", "u3", "u4", "u5")}
    assert done == {"u1": 0, "u2": 1, "u3": 0, "u4": 0, "u5": 1}
    with jobs.session(tenant.id) as s:
        told = {(o.payload["user_id"], o.payload["new_stage"])
                for o in s.scalars(select(OutboxEvent).where(OutboxEvent.event_type == "user.stage_changed"))}
    now = {u: _customer(client, tenant, u)["lifecycle_stage"] for u in ("u1", "u2")}
    assert {(u, now[u]) for u in ("u1", "u2") if now[u] != stages[u]} <= told
