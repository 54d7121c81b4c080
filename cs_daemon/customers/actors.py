"""Jobs of the customers domain."""

from __future__ import annotations

import logging

from ..jobs.broker import actor
from ..jobs.sweeps import sweep_tenants
from . import milestones, service

log = logging.getLogger(__name__)
SWEEP_EVERY_SECONDS = 300


@actor(max_retries=3, time_limit=30 * 60 * 1000)
def sweep_scores() -> None:
    """Apply time decay (dormant, churned, fading engagement) to every tenant's users,
    one tenant (one transaction) at a time; then re-read the milestones of the tenants
    that changed theirs (customers/milestones.py)."""
    tally = sweep_tenants("sweep_scores", lambda session, now: service.tenants_to_sweep(session, now=now), _rescore)
    log.info("score sweep re-scored %d users of %d tenants", tally.done, tally.tenants)
    tally = sweep_tenants("refresh_milestones", lambda session, now: milestones.tenants_to_refresh(session),
                          lambda rt, tenant_id, now: milestones.refresh(rt, tenant_id, now=now))
    if tally.tenants:
        log.info("milestones re-read for %d users of %d tenants", tally.done, tally.tenants)


def _rescore(rt, tenant_id: str, now) -> int:
    with rt.session(tenant_id) as session:
        return service.sweep(session, now=now)
