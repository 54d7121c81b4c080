"""Delivery jobs: one attempt per message; the sweep re-enqueues what is due."""

from __future__ import annotations

import logging
from datetime import timedelta

from ..jobs.broker import actor
from ..jobs.context import runtime
from . import service

log = logging.getLogger(__name__)
SWEEP_EVERY_SECONDS = 15
SWEEP_GRACE = timedelta(seconds=10)   # a row due this recently still has its own message queued


@actor(max_retries=0, time_limit=int(service.LEASE.total_seconds() * 1000))
def send_delivery(delivery_id: str) -> None:
    service.attempt(runtime(), delivery_id)


@actor(max_retries=0, time_limit=60_000)
def sweep_deliveries() -> None:
    rt = runtime()
    with rt.session() as session:
        ids = service.due(session, rt.now(), limit=1000, grace=SWEEP_GRACE)
    for delivery_id in ids:
        send_delivery.send(delivery_id)
    if ids:
        log.info("re-enqueued %d due deliveries", len(ids))
