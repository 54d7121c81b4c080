"""Delivery jobs: a message carries up to service.BATCH deliveries, each attempted on its
own; the sweep re-enqueues what is due (a row a batch has not reached yet may be picked by
the sweep's message first: whichever claims it sends it, the other skips it)."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

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
    for start in range(0, len(ids), service.BATCH):
        send_deliveries.send(ids[start:start + service.BATCH])
    if ids:
        log.info("re-enqueued %d due deliveries", len(ids))
    sweeps.ran(rt, "sweep_deliveries", time.monotonic() - started, sweeps.Tally(done=len(ids)))
