"""The event log's retention: a periodic sweep removes each tenant's recorded events older
than its `config.event_log_retention_days` (docs/architecture.md, "The event log")."""

from __future__ import annotations

import logging
from datetime import datetime

from ..jobs.broker import actor
from ..jobs.context import runtime
from ..jobs.sweeps import for_each_tenant
from ..tenants import config as tenant_config
from ..tenants.models import Tenant
from . import service as outbox

log = logging.getLogger(__name__)
SWEEP_EVERY_SECONDS = 300       # cs status calls a sweep late after 15 minutes


@actor(max_retries=0, time_limit=30 * 60 * 1000)
def sweep_event_log() -> None:
    """Remove each tenant's events older than its retention, one tenant at a time in its
    own error boundary, a batch a transaction."""
    rt = runtime()
    now = rt.now()
    with rt.session() as session:
        tenant_ids = outbox.tenants_with_old_events(session, now)
    tally = for_each_tenant(rt, "sweep_event_log", tenant_ids, lambda tenant_id: expire_events(rt, tenant_id, now))
    if tally.done:
        log.info("event log sweep: %d events removed", tally.done)


def expire_events(rt, tenant_id: str, now: datetime) -> int:
    """Remove the tenant's events past its retention, DELETE_BATCH a transaction (a
    failure keeps the batches already removed); how many went."""
    with rt.session(tenant_id) as session:
        days = tenant_config.read(session.get(Tenant, tenant_id).config).event_log_retention
    removed = 0
    while True:
        with rt.session(tenant_id) as session:
            went = outbox.remove_expired_batch(session, days=days, now=now)
        removed += went
        if went < outbox.DELETE_BATCH:
            return removed
