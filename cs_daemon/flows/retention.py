"""Retention of a tenant's logs (the decision traces, the event log): which tenants hold
rows older than the shortest retention allowed, and the removal of one tenant's rows past
its own retention, a batch a transaction, so a failure keeps the batches already removed.
The trace sweep and the event log sweep are this flow with their table and config key."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Callable

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ..tenants import config as tenant_config
from ..tenants.models import Tenant

MIN_DAYS = 1            # the least a retention key allows (tenants/config.py)
BATCH = 5000            # rows removed per transaction


def tenants_holding_old(session: Session, model, now: datetime) -> list[str]:
    """Tenants holding a row of `model` older than MIN_DAYS: one index probe per tenant on
    (tenant_id, created_at), in one query."""
    old = select(model.id).where(model.tenant_id == Tenant.id, model.created_at < now - timedelta(days=MIN_DAYS))
    return list(session.scalars(select(Tenant.id).where(old.exists()).order_by(Tenant.id)))


def remove_batch(session: Session, model, *, cutoff: datetime) -> int:
    """Delete up to BATCH of the session's tenant's rows of `model` created before
    `cutoff`, oldest first; how many went (fewer than BATCH: none is left)."""
    ids = list(session.scalars(select(model.id).where(model.created_at < cutoff)
                               .order_by(model.created_at).limit(BATCH)))
    if not ids:
        return 0
    return session.execute(delete(model).where(model.id.in_(ids))
                           .execution_options(synchronize_session=False)).rowcount


def expire(rt, tenant_id: str, model, days_of: Callable[[tenant_config.TenantConfig], float],
           now: datetime) -> int:
    """Remove the tenant's rows of `model` older than `days_of(its config)`; how many went."""
    with rt.session(tenant_id) as session:
        cutoff = now - timedelta(days=days_of(tenant_config.read(session.get(Tenant, tenant_id).config)))
    removed = 0
    while True:
        with rt.session(tenant_id) as session:
            went = remove_batch(session, model, cutoff=cutoff)
        removed += went
        if went < BATCH:
            return removed
