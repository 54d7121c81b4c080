"""One tenant's slow receivers cannot take every worker thread (docs/webhooks.md, "Slow
receivers"): once one of its attempts has been in flight SLOW_AFTER seconds, a process
runs at most two of that tenant's attempts at once and defers the others (no attempt
used, due again shortly), while every other tenant's deliveries go out. Real receivers
on loopback; the in-flight clock is injected, so the test waits on no timer."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import select

from cs_daemon.delivery import service as delivery
from cs_daemon.delivery import slow_receivers
from cs_daemon.delivery.models import Delivery, DeliveryAttempt
from cs_daemon.delivery.slow_receivers import SlowReceivers
from tests.support.receiver import Receiver


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ticks(monkeypatch):
    clock = Ticks()
    monkeypatch.setattr(delivery, "SLOW", SlowReceivers(clock=clock))
    return clock


@pytest.fixture
def held():
    """A receiver that answers 200 only once the test lets it (each attempt held in flight)."""
    release = threading.Event()
    r = Receiver(script=[("hold", release, 200)])
    r.release = release
    yield r
    release.set()
    r.close()


def _delivery(rt, tenant, url) -> str:
    with rt.session(tenant.id) as s:
        return delivery.create(s, tenant.id, kind="event", channel="webhook", url=url, body={"event": "x"}, secret_enc="",
                               event_type="user.risk_changed", now=rt.now(), enqueue=False).id


def _in_flight(receiver: Receiver, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(receiver.requests) < count:
        assert time.monotonic() < deadline, len(receiver.requests)
        time.sleep(0.01)


def _attempts(rt, delivery_id: str) -> int:
    with rt.session() as s:
        return len(s.scalars(select(DeliveryAttempt.id).where(DeliveryAttempt.delivery_id == delivery_id)).all())


def test_a_tenant_whose_receiver_hangs_does_not_hold_up_another_tenants_deliveries(rt, make_tenant, receiver, held,
                                                                                   ticks):
    slow, good = make_tenant("Slow", plan_tier="growth"), make_tenant("Good", plan_tier="growth")
    stuck = [_delivery(rt, slow, held.url) for _ in range(4)]
    fine = _delivery(rt, good, receiver.url)
    workers = [threading.Thread(target=delivery.attempt, args=(rt, d), daemon=True) for d in stuck[:2]]
    for worker in workers:
        worker.start()
    _in_flight(held, 2)                                  # two worker threads wait on the slow tenant's receiver
    ticks.now += slow_receivers.SLOW_AFTER               # ... long enough to call it slow

    started = time.monotonic()
    assert delivery.attempt(rt, stuck[2]) is None        # its third: deferred at once, not sent
    assert time.monotonic() - started < 0.5 and len(held.requests) == 2
    with rt.session() as s:
        row = s.get(Delivery, stuck[2])
        assert row.status == "pending" and row.attempts == 0 and row.locked_until is None
        assert row.next_attempt_at.replace(tzinfo=None) == (rt.now() + delivery.DEFER).replace(tzinfo=None)
    assert _attempts(rt, stuck[2]) == 0                  # none of its six tries used

    assert delivery.attempt(rt, fine) == "delivered"     # the other tenant's goes out meanwhile
    assert len(receiver.requests) == 1

    asked = threading.Thread(target=delivery.attempt, args=(rt, stuck[3]), kwargs={"paced": False}, daemon=True)
    asked.start()                                        # a replay or test send someone waits on: never deferred
    _in_flight(held, 3)
    workers.append(asked)

    held.release.set()
    for worker in workers:
        worker.join(15)
    assert [_attempts(rt, d) for d in (stuck[0], stuck[1], stuck[3])] == [1, 1, 1]


def test_a_tenant_whose_receivers_answer_in_time_is_never_held_back(rt, make_tenant, held, ticks):
    busy = make_tenant("Busy", plan_tier="growth")
    ids = [_delivery(rt, busy, held.url) for _ in range(4)]
    results: dict[str, str | None] = {}
    workers = [threading.Thread(target=lambda d=d: results.update({d: delivery.attempt(rt, d)}), daemon=True)
               for d in ids]
    for worker in workers:
        worker.start()
    _in_flight(held, 4)                                  # all four at once: none has been in flight long
    held.release.set()
    for worker in workers:
        worker.join(15)
    assert sorted(results.values()) == ["delivered"] * 4


def test_a_tenant_stays_slow_for_a_while_after_its_last_slow_attempt():
    clock = Ticks()
    slow = SlowReceivers(clock=clock)
    first = slow.enter("t")
    clock.now += slow_receivers.SLOW_AFTER
    slow.leave("t", first)                               # it took SLOW_AFTER: the tenant is slow
    tokens = [slow.enter("t") for _ in range(slow_receivers.SLOW_TENANT_SENDS)]
    assert None not in tokens and slow.enter("t") is None and slow.enter("other") is not None
    for token in tokens:
        slow.leave("t", token)                           # quick ones: they do not make it slow again
    clock.now += slow_receivers.SLOW_FOR
    assert None not in [slow.enter("t") for _ in range(slow_receivers.SLOW_TENANT_SENDS + 1)]   # slow no more
