"""Jobs of the interventions domain."""

from __future__ import annotations

import logging

from ..jobs.broker import actor
from ..jobs.context import runtime
from . import outcomes

log = logging.getLogger(__name__)
SWEEP_EVERY_SECONDS = 60


@actor(max_retries=3, time_limit=30 * 60 * 1000)
def sweep_outcomes() -> None:
    """Record the outcomes now known of delivered interventions, tenant by tenant."""
    rt = runtime()
    now = rt.now()
    with rt.session() as session:
        tenant_ids = outcomes.tenants_with_open(session)
    recorded = 0
    for tenant_id in tenant_ids:
        with rt.session(tenant_id) as session:
            recorded += outcomes.sweep(session, now=now)
    if recorded:
        log.info("outcome sweep recorded %d outcomes", recorded)
