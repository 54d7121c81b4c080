"""Jobs of the interventions domain."""

from __future__ import annotations

import logging

from ..jobs.broker import actor
from ..jobs.sweeps import SkippedStoredData, sweep_tenants
from ..playbooks import service as playbooks
from . import outcomes

log = logging.getLogger(__name__)
SWEEP_EVERY_SECONDS = 60


@actor(max_retries=3, time_limit=30 * 60 * 1000)
def sweep_outcomes() -> None:
    """Record the outcomes now known of delivered interventions, tenant by tenant."""
    tally = sweep_tenants("sweep_outcomes", lambda session, now: outcomes.tenants_with_open(session), _settle)
    if tally.done:
        log.info("outcome sweep recorded %d outcomes", tally.done)


def _settle(rt, tenant_id: str, now) -> int:
    with rt.session(tenant_id) as session:
        recorded = outcomes.sweep(session, now=now)
        held = outcomes.held_back(session)
    if held:    # raised once the recorded outcomes are committed
        raise SkippedStoredData(f"outcomes held back: {playbooks.describe_skipped(held)}")
    return recorded
