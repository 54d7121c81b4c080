"""Expiries, tenant by tenant: shadow mode switched off 72 hours after it was turned on
(also done on the way when the tenant is read), and external actions delivered without
an outcome for 7 days marked `expired` (docs/api.md, "Settings")."""

from __future__ import annotations

import logging

from sqlalchemy import select, union

from ..external import service as external
from ..jobs.broker import actor
from ..jobs.sweeps import sweep_tenants
from . import service
from .models import Tenant

log = logging.getLogger(__name__)
SWEEP_EVERY_SECONDS = 300


@actor(max_retries=0, time_limit=10 * 60 * 1000)
def sweep_expiries() -> None:
    tally = sweep_tenants("sweep_expiries", _expiring, _expire)
    if tally.done:
        log.info("expiry sweep: %d expired", tally.done)


def _expiring(session, now) -> list[str]:
    return sorted(session.scalars(union(select(Tenant.id).where(Tenant.shadow_mode.is_(True)),
                                        external.tenants_with_expiring(now))))


def _expire(rt, tenant_id: str, now) -> int:
    with rt.session(tenant_id) as session:
        switched = service.expire_shadow_mode(service.get(session, tenant_id, now=now), now)
        return int(switched) + external.expire(session, now=now)
