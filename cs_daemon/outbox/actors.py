"""The event log's retention: a periodic sweep removes each tenant's recorded events older
than its `config.event_log_retention_days` (docs/architecture.md, "The event log")."""

from __future__ import annotations

import logging

from ..flows import retention
from ..jobs.broker import actor
from ..jobs.sweeps import sweep_tenants
from .models import OutboxEvent

log = logging.getLogger(__name__)
SWEEP_EVERY_SECONDS = 300       # cs status calls a sweep late after 15 minutes


@actor(max_retries=0, time_limit=30 * 60 * 1000)
def sweep_event_log() -> None:
    """Remove each tenant's events older than its retention, one tenant at a time in its
    own error boundary, a batch a transaction."""
    tally = sweep_tenants("sweep_event_log", lambda session, now: retention.tenants_holding_old(session, OutboxEvent, now),
                          expire_events)
    if tally.done:
        log.info("event log sweep: %d events removed", tally.done)


def expire_events(rt, tenant_id: str, now) -> int:
    return retention.expire(rt, tenant_id, OutboxEvent, lambda config: config.event_log_retention, now)
