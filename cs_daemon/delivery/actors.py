"""Delivery jobs: a message carries up to service.BATCH deliveries, each attempted on its
own; the sweep re-enqueues what is due (a row a batch has not reached yet may be picked by
the sweep's message first: whichever claims it sends it, the other skips it).

`send_soon` and `send_later` are the after-commit handlers of the delivery service's
domain events (`DeliveryDue`, `DeliveryRetryDue`; registered by cs_daemon/wiring.py):
the service writes rows and publishes, and never imports this module."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from .. import domain_events
from ..config import Settings
from ..jobs.broker import actor
from ..jobs import sweeps
from ..jobs.context import runtime
from . import service

log = logging.getLogger(__name__)
SWEEP_EVERY_SECONDS = 15
SWEEP_GRACE = timedelta(seconds=10)   # a row due this recently still has its own message queued


@actor(max_retries=0, time_limit=int(service.LEASE.total_seconds() * 1000) * service.BATCH)
def send_deliveries(delivery_ids: list[str]) -> None:
    """One attempt for each (claimed just before its send, so each lease covers one send)."""
    rt = runtime()
    for delivery_id in delivery_ids:
        service.attempt(rt, delivery_id)


@actor(max_retries=0, time_limit=60_000)
def sweep_deliveries() -> None:
    rt = runtime()
    started = time.monotonic()
    with rt.session() as session:
        ids = service.due(session, rt.now(), limit=1000, grace=SWEEP_GRACE)
    _enqueue(ids)
    if ids:
        log.info("re-enqueued %d due deliveries", len(ids))
    sweeps.ran(rt, "sweep_deliveries", time.monotonic() - started, sweeps.Tally(done=len(ids)))


def _enqueue(delivery_ids: list[str]) -> None:
    """A job message for every service.BATCH deliveries."""
    for start in range(0, len(delivery_ids), service.BATCH):
        send_deliveries.send(delivery_ids[start:start + service.BATCH])


def send_soon(due: list[domain_events.DeliveryDue], _settings: Settings | None = None) -> None:
    """After commit: the deliveries made in one transaction, in job messages of BATCH."""
    _enqueue([event.delivery_id for event in due])


def send_later(retries: list[domain_events.DeliveryRetryDue], _settings: Settings | None = None) -> None:
    """After commit: each retry scheduled in the transaction, a message delayed until due."""
    for event in retries:
        options = {"delay": int(event.delay.total_seconds() * 1000)} if event.delay else {}
        send_deliveries.send_with_options(args=([event.delivery_id],), **options)
