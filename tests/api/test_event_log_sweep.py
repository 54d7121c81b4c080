"""The event log's retention: the periodic sweep removes each tenant's recorded events
older than its `config.event_log_retention_days` (default 30), in batches, one tenant at a
time in its own error boundary (docs/architecture.md, "The event log"); the key is typed
and validated like every tenant config key (docs/tenant-config.md)."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, select

from cs_daemon import wiring
from cs_daemon.flows import retention
from cs_daemon.jobs import heartbeat, registry
from cs_daemon.outbox import actors as event_log_jobs
from cs_daemon.outbox import service as outbox
from cs_daemon.outbox.models import OutboxEvent
from cs_daemon.tenants import config as tenant_config
from cs_daemon.uow import uow_of
from tests.api import test_tenant_config
from tests.conftest import auth

empty_db = test_tenant_config.empty_db      # the fixture of an empty database of each backend


@pytest.fixture
def jobs(rt):
    rt.install_broker()
    heartbeat.beat(rt.cache)
    return rt


def _record(rt, tenant, kind="user.stage_changed") -> str:
    with rt.session(tenant.id) as s:
        return outbox.record(s, tenant.id, kind, {"user_id": "u1"}, now=rt.now())


def _logged(rt, tenant) -> list[str]:
    with rt.session(tenant.id) as s:
        return sorted(s.scalars(select(OutboxEvent.id)))


def _failures(client) -> list[dict]:
    return client.get("/api/health").json["checks"]["sweeps"]["failures"]


def test_each_tenants_old_events_go_by_its_own_retention_and_recent_ones_stay(make_tenant, jobs, clock, monkeypatch):
    monkeypatch.setattr(retention, "BATCH", 2)              # several batches, each its own transaction
    short = make_tenant("Short", config={"event_log_retention_days": 2})
    usual = make_tenant("Usual")
    old = {t.id: [_record(jobs, t) for _ in range(5)] for t in (short, usual)}
    clock.advance(days=3)
    new = {t.id: [_record(jobs, t, "custom.x.y")] for t in (short, usual)}
    event_log_jobs.sweep_event_log()
    assert _logged(jobs, short) == new[short.id]
    assert _logged(jobs, usual) == sorted(old[usual.id] + new[usual.id])
    clock.advance(days=28)                                      # the usual tenant's first events are 31 days old
    event_log_jobs.sweep_event_log()
    assert _logged(jobs, usual) == new[usual.id]
    assert _logged(jobs, short) == []


def test_one_tenants_failure_does_not_stop_anothers(client, make_tenant, jobs, clock, monkeypatch):
    bad, good = make_tenant("Bad"), make_tenant("Good")
    for t in (bad, good):
        _record(jobs, t)
    clock.advance(days=31)
    kept = {t.id: _record(jobs, t) for t in (bad, good)}
    real = retention.remove_batch

    def broken_for_bad(session, model, **kw):
        if uow_of(session).tenant_id == bad.id:
            raise RuntimeError("disk on fire")
        return real(session, model, **kw)

    monkeypatch.setattr(retention, "remove_batch", broken_for_bad)
    event_log_jobs.sweep_event_log()
    assert _logged(jobs, good) == [kept[good.id]]
    assert len(_logged(jobs, bad)) == 2                         # its sweep failed: nothing went
    [failure] = _failures(client)
    assert (failure["sweep"], failure["tenant_id"]) == ("sweep_event_log", bad.id)
    assert failure["error"].startswith("RuntimeError")

    monkeypatch.setattr(retention, "remove_batch", real)   # repaired: the next run clears it
    event_log_jobs.sweep_event_log()
    assert _logged(jobs, bad) == [kept[bad.id]]
    assert _failures(client) == []


@pytest.mark.parametrize("value", [0, 0.5, 3651, "30", True, [30]])
def test_the_retention_key_is_validated_like_every_config_key(client, tenant, value):
    h = auth(tenant.key)
    resp = client.patch("/api/settings", headers=h, json={"config": {"event_log_retention_days": value}})
    assert resp.status_code == 400, resp.json
    assert "config.event_log_retention_days" in [d["field"] for d in resp.json["details"]]


def test_the_retention_key_takes_1_to_3650_days_and_defaults_to_30(client, tenant):
    for days in (1, 7.5, 3650):
        resp = client.patch("/api/settings", headers=auth(tenant.key),
                            json={"config": {"event_log_retention_days": days}})
        assert resp.status_code == 200, resp.json
        assert resp.json["config"]["event_log_retention_days"] == days
    assert tenant_config.read({}).event_log_retention == 30
    assert tenant_config.read({"event_log_retention_days": 7}).event_log_retention == 7
    assert tenant_config.read({"event_log_retention_days": "x"}).event_log_retention == 30   # stored bad: default


def test_the_event_log_is_wired_as_a_periodic_sweep():
    wiring.wire()
    assert event_log_jobs.sweep_event_log in registry.ACTORS
    [periodic] = [p for p in registry.periodic() if p.name == "sweep_event_log"]
    assert periodic.every_seconds == event_log_jobs.SWEEP_EVERY_SECONDS


@pytest.mark.filterwarnings("ignore:Skipped unsupported reflection of expression-based index")
def test_migration_0028_indexes_the_log_by_tenant_and_time_and_takes_it_back(empty_db):
    from alembic import command

    from cs_daemon import migrate
    from cs_daemon.db import get_engine

    def indexes() -> dict:
        engine = get_engine(empty_db)
        engine.dispose()                                        # read the schema as it is now
        return {ix["name"]: ix["column_names"] for ix in inspect(engine).get_indexes("outbox_events")}

    migrate.upgrade(empty_db, "0027")
    before = indexes()
    assert before["ix_outbox_events_tenant_id"] == ["tenant_id"] and "ix_outbox_events_created" not in before
    migrate.upgrade(empty_db)
    assert indexes() == {"ix_outbox_events_created": ["tenant_id", "created_at"]}     # one index, not two
    command.downgrade(migrate.alembic_config(empty_db), "0027")
    assert indexes() == before
