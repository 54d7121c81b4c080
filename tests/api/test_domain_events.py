"""Domain events run their handlers in the publisher's transaction: what a handler writes
commits or rolls back with what caused it; after-commit handlers run once the transaction
has committed, with all its events of their types in one call, and never after a rollback
(docs/architecture.md, "The unit of work and domain events")."""

from __future__ import annotations

from datetime import timedelta

import logging

import pytest
from sqlalchemy import func, select

from cs_daemon import domain_events
from cs_daemon.customers.ingest import Incoming, ingest
from cs_daemon.customers.models import Event
from cs_daemon.delivery import actors as delivery_jobs
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.interventions.models import Intervention
from cs_daemon.outbox import service as outbox
from cs_daemon.outbox.models import OutboxEvent
from cs_daemon.uow import uow_of


class Abandoned(Exception):
    pass


@pytest.fixture
def listening():
    """Register `handler` for an event type for the test's duration, then take it back."""
    added = []

    def listen(event_type, handler):
        domain_events.handle(event_type, handler)
        added.append((event_type, handler))

    yield listen
    for event_type, handler in added:
        domain_events._handlers[event_type].remove(handler)


@pytest.fixture
def after_commit():
    """Register `handler` to run after commit for the test's duration, then take it back."""
    added = []

    def listen(event_type, handler):
        domain_events.handle_after_commit(event_type, handler)
        added.append((event_type, handler))

    yield listen
    for event_type, handler in added:
        domain_events._after_commit[event_type].remove(handler)


@pytest.fixture
def job_messages(monkeypatch):
    """The delivery job's messages, as the root's handler of DeliveryDue sends them."""
    sent: list[list[str]] = []
    monkeypatch.setattr(delivery_jobs.send_deliveries, "send", lambda ids: sent.append(list(ids)))
    return sent


def _delivery(session, tenant_id: str, now, n: int) -> str:
    return delivery.create(session, tenant_id, kind="test", channel="sink", url=f"sink:{n}", body={"n": n},
                           secret_enc="", event_type="webhook.test", now=now).id


def _handled_rows(session) -> int:
    return session.scalar(select(func.count()).select_from(OutboxEvent)
                          .where(OutboxEvent.event_type == "test.handled"))


def _note_handled(session, event) -> None:
    outbox.insert_rows(session, outbox.rows_of(event.tenant_id, [("test.handled", {})], now=event.now,
                                               test=event.test))


def test_a_handler_of_events_stored_writes_in_the_ingest_transaction_and_rolls_back_with_it(
        rt, make_tenant, listening):
    tenant = make_tenant()
    now = rt.now()
    with rt.session(tenant.id) as s:
        ingest(s, tenant.id, [Incoming("u1", "$identify", {"name": "Ada"})], source="api", test=False, now=now)
        s.add(Intervention(user_id="u1", status="delivered", channel="email", planned_at=now, updated_at=now,
                           delivered_at=now, attribution_until=now + timedelta(days=7)))
    seen = []

    def handler(session, event):
        seen.append(event)
        _note_handled(session, event)

    listening(domain_events.EventsStored, handler)
    later = now + timedelta(minutes=1)
    with pytest.raises(Abandoned):
        with rt.session(tenant.id) as s:
            ingest(s, tenant.id, [Incoming("u1", "report_created", timestamp=later)], source="api", test=False,
                   now=later)
            assert [e.events for e in seen] == [[("u1", "report_created", later)]]
            assert seen[0] in uow_of(s).events
            # in the transaction: the handler's row, and the response the outcome handler recorded
            assert _handled_rows(s) == 1
            assert s.scalars(select(Intervention.responded_at)).one() == later
            raise Abandoned
    with rt.session(tenant.id) as s:
        assert _handled_rows(s) == 0
        assert s.scalars(select(Intervention.responded_at)).one() is None
        assert s.scalar(select(func.count()).select_from(Event).where(Event.event == "report_created")) == 0


def test_recording_a_webhook_event_publishes_its_rows_in_the_same_transaction(rt, make_tenant, listening):
    tenant = make_tenant()
    seen = []

    def handler(session, event):
        seen.append(event)
        _note_handled(session, event)

    listening(domain_events.OutboxRowsWritten, handler)
    with rt.session(tenant.id) as s:
        ids = outbox.record_many(s, tenant.id, [("user.opted_out", {"user_id": "u1"})], now=rt.now())
        assert [[r["id"] for r in e.rows] for e in seen] == [ids]
        assert seen[0].rows[0]["payload"] == {"event": "user.opted_out", "user_id": "u1"}
        assert _handled_rows(s) == 1
        s.rollback()
        assert uow_of(s).events == [] and _handled_rows(s) == 0
    # a caller that knows the tenant has no endpoint publishes nothing
    with rt.session(tenant.id) as s:
        outbox.record_many(s, tenant.id, [("user.opted_out", {"user_id": "u2"})], now=rt.now(), fan_out=False)
        assert len(seen) == 1 and uow_of(s).events == []


def test_an_after_commit_handler_gets_every_event_of_the_transaction_in_one_call_once_it_committed(
        rt, make_tenant, after_commit, job_messages):
    tenant = make_tenant()
    calls = []

    def handler(events, settings):
        ids = [e.delivery_id for e in events]
        with rt.session(tenant.id) as other:    # another transaction sees the rows: committed
            committed = set(other.scalars(select(Delivery.id).where(Delivery.id.in_(ids))))
        calls.append((ids, committed, settings))

    after_commit(domain_events.DeliveryDue, handler)
    with rt.session(tenant.id) as s:
        made = [_delivery(s, tenant.id, rt.now(), n) for n in range(12)]
        assert [e.delivery_id for e in uow_of(s).events] == made
        assert calls == [] and job_messages == []      # nothing before the commit
    assert calls == [(made, set(made), rt.settings)]
    # the root's handler too: one job message per delivery.BATCH of them, not one each
    assert job_messages == [made[:10], made[10:]]


def test_an_after_commit_handler_never_runs_for_a_rolled_back_transaction(
        rt, make_tenant, after_commit, job_messages):
    tenant = make_tenant()
    calls = []
    after_commit(domain_events.DeliveryDue, lambda events, settings: calls.append([e.delivery_id for e in events]))
    with pytest.raises(Abandoned):
        with rt.session(tenant.id) as s:
            _delivery(s, tenant.id, rt.now(), 1)
            raise Abandoned
    assert calls == [] and job_messages == []
    # rolled back in a session that goes on: only what the committed transaction published
    with rt.session(tenant.id) as s:
        _delivery(s, tenant.id, rt.now(), 2)
        s.rollback()
        kept = _delivery(s, tenant.id, rt.now(), 3)
    assert calls == [[kept]] and job_messages == [[kept]]
    # a session that does not commit runs none
    with rt.session(tenant.id, commit=False) as s:
        _delivery(s, tenant.id, rt.now(), 4)
    assert calls == [[kept]] and job_messages == [[kept]]


def test_a_failing_after_commit_handler_is_logged_and_the_commit_stands(rt, make_tenant, after_commit,
                                                                       job_messages, caplog):
    tenant = make_tenant()

    def broken(events, settings):
        raise ConnectionError("broker unreachable")

    after_commit(domain_events.DeliveryDue, broken)
    caplog.set_level(logging.WARNING, logger="cs_daemon.db")
    with rt.session(tenant.id) as s:
        made = _delivery(s, tenant.id, rt.now(), 1)
    [warning] = [r.getMessage() for r in caplog.records if "was not done" in r.getMessage()]
    assert "broken" in warning and made in warning and "broker unreachable" in warning
    assert "database_url" not in warning                    # the handler's settings are left out
    assert job_messages == [[made]]                         # the other handlers still ran
    with rt.session(tenant.id) as s:
        assert s.get(Delivery, made).status == "pending"
