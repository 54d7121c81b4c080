"""Time decay by the periodic sweep, and the once-per-cluster scheduler."""

from __future__ import annotations

import time

from sqlalchemy import select

from cs_daemon.customers import actors, service
from cs_daemon.jobs import scheduler
from cs_daemon.jobs.scheduler import Periodic
from cs_daemon.outbox.models import OutboxEvent
from tests.conftest import auth


def _stage(client, tenant, user):
    return client.get(f"/api/customers/{user}", headers=auth(tenant.key)).json["customer"]["lifecycle_stage"]


def test_a_user_idle_for_31_days_is_churned_after_the_sweep(client, tenant, rt, clock):
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "viewed"}]})
    clock.advance(days=15)
    with rt.session() as s:
        assert service.sweep(s, now=clock.now()) == 1
    assert _stage(client, tenant, "u1") == "dormant"
    clock.advance(days=16)
    with rt.session() as s:
        service.sweep(s, now=clock.now())
    assert _stage(client, tenant, "u1") == "churned"
    stats = client.get("/api/customers/stats", headers=h).json["stats"]
    assert stats == {"total": 1, "active": 0, "at_risk": 1, "churned": 1}
    with rt.session(tenant.id) as s:
        changes = [(o.payload["previous_stage"], o.payload["new_stage"]) for o in s.scalars(
            select(OutboxEvent).where(OutboxEvent.event_type == "user.stage_changed")
            .order_by(OutboxEvent.created_at))]
    assert changes[-2:] == [(changes[-2][0], "dormant"), ("dormant", "churned")]


def test_the_sweep_covers_every_tenant_and_skips_fresh_scores(client, make_tenant, rt, clock):
    a, b = make_tenant("A"), make_tenant("B")
    for t in (a, b):
        client.post("/api/track", headers=auth(t.key), json={"events": [{"user_id": "u", "event": "x"}]})
    with rt.session() as s:
        assert service.sweep(s, now=clock.now()) == 0  # just scored
    clock.advance(days=40)
    with rt.session() as s:
        assert service.sweep(s, now=clock.now()) == 2
    assert _stage(client, a, "u") == _stage(client, b, "u") == "churned"


def test_the_sweep_job_runs_on_the_worker(client, tenant, rt, clock):
    client.post("/api/track", headers=auth(tenant.key), json={"events": [{"user_id": "u", "event": "x"}]})
    clock.advance(days=31)
    broker = rt.install_broker()
    worker = None
    try:
        from dramatiq import Worker

        worker = Worker(broker, worker_threads=1)
        worker.start()
        actors.sweep_scores.send()
        deadline = time.monotonic() + 20
        while _stage(client, tenant, "u") != "churned" and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if worker:
            worker.stop()
    assert _stage(client, tenant, "u") == "churned"


def test_two_schedulers_enqueue_a_periodic_job_once_per_slot(rt):
    sent = []
    task = Periodic("probe", 60, lambda: sent.append(1))
    now = 1_000_000 * 60 + 5.0
    assert scheduler.tick(rt.cache, [task], now) == ["probe"]
    assert scheduler.tick(rt.cache, [task], now + 1) == []        # same slot, other process
    assert scheduler.tick(rt.cache, [task], now + 60) == ["probe"]  # next slot
    assert len(sent) == 2
