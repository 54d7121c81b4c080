"""Re-reading the users' milestones after a tenant changed them (docs/scoring.md,
"Changing the milestones").

Ingest records a milestone as its event arrives, and only the milestones configured at
that moment. A tenant that names its milestones after its users did them would count
none, and one that adds a milestone would see its users' activation drop. So a change of
`config.milestones` stamps `tenants.milestones_changed_at` in the same transaction
(tenants/service.py); the score sweep then takes every user of the tenant in id order,
a batch a transaction (their rows locked, as ingest locks them, in the same order), adds
the configured milestones their stored events show, and re-scores them (a stage or risk
change goes to the outbox as any other). The stamp is cleared at the end unless the
milestones changed again meanwhile; a run cut short starts again at the next sweep,
which does no harm (the same milestones, the same scores).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ..engine import scoring
from ..outbox import service as outbox
from ..tenants import config as tenant_config
from ..tenants.models import Tenant
from .models import Customer, Event
from .service import store_ended_days
from .state import rescore

BATCH = 500


def tenants_to_refresh(session: Session) -> list[str]:
    """Tenants whose milestones changed since the sweep last read them (an unscoped session)."""
    return list(session.scalars(select(Tenant.id).where(Tenant.milestones_changed_at.isnot(None))
                                .order_by(Tenant.milestones_changed_at, Tenant.id)))


def refresh(rt, tenant_id: str, *, now: datetime) -> int:
    """Every user of the tenant re-read and re-scored, a batch a transaction; how many."""
    with rt.session(tenant_id) as session:
        stamp, config = session.execute(select(Tenant.milestones_changed_at, Tenant.config)
                                        .where(Tenant.id == tenant_id)).one()
    if stamp is None:
        return 0
    rules = scoring.Rules.of(tenant_config.scoring_of(config))
    after, done = "", 0
    while True:
        with rt.session(tenant_id) as session:
            count, after = refresh_batch(session, tenant_id, rules, after=after, now=now)
        done += count
        if count < BATCH:
            break
    with rt.session(tenant_id) as session:
        session.execute(update(Tenant).where(Tenant.id == tenant_id, Tenant.milestones_changed_at == stamp)
                        .values(milestones_changed_at=None))
    return done


def refresh_batch(session: Session, tenant_id: str, rules: scoring.Rules, *, after: str,
                  now: datetime) -> tuple[int, str]:
    """The next BATCH users after id `after` (in a session of the tenant): locked,
    their milestones read from their events, re-scored. Returns (how many, the last id)."""
    customers = session.scalars(select(Customer).where(Customer.id > after).order_by(Customer.id)
                                .limit(BATCH).with_for_update()).all()
    if not customers:
        return 0, after
    did = _milestones_done(session, [c.id for c in customers], sorted(rules.milestones))
    store_ended_days(session, customers, now=now)
    changes = []
    for customer in customers:
        state = scoring.UserState.from_json(customer.state)
        if state.first_seen_at is None:
            state.first_seen_at = customer.created_at
        state.milestones_done = state.milestones_done + sorted(did.get(customer.id, set())
                                                               - set(state.milestones_done))
        changes += rescore(customer, state, rules, now)
    outbox.record_many(session, tenant_id, changes, now=now)
    return len(customers), customers[-1].id


def _milestones_done(session: Session, user_ids: list[str], milestones: list[str]) -> dict[str, set[str]]:
    """Which of `milestones` each user has an event of (ix_events_user serves it)."""
    if not milestones:
        return {}
    done: dict[str, set[str]] = {}
    for user_id, name in session.execute(select(Event.user_id, Event.event).where(
            Event.user_id.in_(user_ids), Event.event.in_(milestones)).distinct()):
        done.setdefault(user_id, set()).add(name)
    return done
