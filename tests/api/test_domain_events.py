"""Domain events run their handlers in the publisher's transaction: what a handler writes
commits or rolls back with what caused it (docs/architecture.md, "The unit of work and
domain events")."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from cs_daemon import domain_events
from cs_daemon.customers.ingest import Incoming, ingest
from cs_daemon.customers.models import Event
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
