"""Jobs of the customers domain."""

from __future__ import annotations

import logging

from ..jobs.broker import actor
from ..jobs.context import runtime
from ..jobs.sweeps import for_each_tenant
from . import service

log = logging.getLogger(__name__)
SWEEP_EVERY_SECONDS = 300


@actor(max_retries=3, time_limit=30 * 60 * 1000)
def sweep_scores() -> None:
    """Apply time decay (dormant, churned, fading engagement) to every tenant's users,
    one tenant (one transaction) at a time."""
    rt = runtime()
    now = rt.now()
    with rt.session() as session:
        tenant_ids = service.tenants_to_sweep(session, now=now)

    def rescore(tenant_id: str) -> int:
        with rt.session(tenant_id) as session:
            return service.sweep(session, now=now)

    tally = for_each_tenant(rt, "sweep_scores", tenant_ids, rescore)
    log.info("score sweep re-scored %d users of %d tenants", tally.done, tally.tenants)
