"""Jobs of the interventions domain."""

from __future__ import annotations

import logging

from ..jobs.broker import actor
from ..jobs.context import runtime
from ..jobs.sweeps import SkippedStoredData, for_each_tenant
from ..playbooks import service as playbooks
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

    def settle(tenant_id: str) -> int:
        with rt.session(tenant_id) as session:
            recorded = outcomes.sweep(session, now=now)
            held = outcomes.held_back(session)
        if held:
            raise SkippedStoredData(f"outcomes held back: {playbooks.describe_skipped(held)}")
        return recorded

    tally = for_each_tenant(rt, "sweep_outcomes", tenant_ids, settle)
    if tally.done:
        log.info("outcome sweep recorded %d outcomes", tally.done)
