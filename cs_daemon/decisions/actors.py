"""Decision jobs: owed decisions after ingest, the periodic decision sweep, and the
removal of decision traces past their tenant's retention.

`decide_soon` is the after-commit handler of `DecisionsOwed` (registered by
cs_daemon/wiring.py): decisions/requests.py writes the requests and publishes, and never
imports this module."""

from __future__ import annotations

import logging

from sqlalchemy import select

from .. import domain_events
from ..config import Settings
from ..flows import retention
from ..jobs.broker import actor
from ..jobs.context import runtime
from ..jobs.sweeps import for_each_tenant, sweep_tenants
from ..playbooks.models import Playbook
from ..tenants.models import Tenant
from . import requests
from .models import DecisionTrace

log = logging.getLogger(__name__)
SWEEP_EVERY_SECONDS = 60
TRACE_SWEEP_EVERY_SECONDS = 300     # cs status calls a sweep late after 15 minutes


@actor(max_retries=3, time_limit=10 * 60 * 1000)
def decide_owed(request_ids: list[str]) -> None:
    rt = runtime()
    for request_id in request_ids:
        requests.process(rt, request_id)


DECIDE_BATCH = 100     # requests a decide_owed message carries


def decide_later(request_ids: list[str]) -> None:
    """A decide_owed message for every DECIDE_BATCH requests."""
    for start in range(0, len(request_ids), DECIDE_BATCH):
        decide_owed.send(request_ids[start:start + DECIDE_BATCH])


def decide_soon(owed: list[domain_events.DecisionsOwed], _settings: Settings | None = None) -> None:
    """After commit: the requests owed in the transaction, batched as each was written."""
    for event in owed:
        decide_later(event.request_ids)


@actor(max_retries=0, time_limit=30 * 60 * 1000)
def sweep_decisions() -> None:
    """Re-enqueue owed decisions whose job was lost; decide for users that untriggered
    active playbooks match (the engine's constraints keep this from repeating itself)."""
    rt = runtime()
    now = rt.now()
    with rt.session() as session:
        owed = requests.overdue(session, now)
        tenant_ids = list(session.scalars(
            select(Tenant.id).where(Tenant.kill_switch_active.is_(False))
            .where(Tenant.id.in_(select(Playbook.tenant_id).where(Playbook.status == "active")))))
    if owed:
        decide_later(owed)
    tally = for_each_tenant(rt, "sweep_decisions", tenant_ids,
                            lambda tenant_id: requests.sweep_tenant(rt, tenant_id, now))
    if owed or tally.done:
        log.info("decision sweep: %d owed re-enqueued, %d interventions", len(owed), tally.done)


@actor(max_retries=0, time_limit=30 * 60 * 1000)
def sweep_traces() -> None:
    """Remove each tenant's decision traces older than its `config.trace_retention_days`
    (docs/decisions.md, "The decision trace"), and decision requests decided more than a
    day ago."""
    tally = sweep_tenants("sweep_traces", lambda session, now: retention.tenants_holding_old(session, DecisionTrace, now),
                          expire_traces)
    if tally.done:
        log.info("trace sweep: %d traces removed", tally.done)
    rt = runtime()
    with rt.session() as session:     # and the decision requests decided long ago
        pruned = requests.prune_done(session, now=rt.now())
    if pruned:
        log.info("trace sweep: %d decided requests removed", pruned)


def expire_traces(rt, tenant_id: str, now) -> int:
    return retention.expire(rt, tenant_id, DecisionTrace, lambda config: config.trace_retention, now)
