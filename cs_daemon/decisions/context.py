"""Loading what the decision engine needs for one user, in a few queries."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from ..customers.models import Customer, Event
from ..engine import conditions
from ..engine.contact_policy import Contact, ContactPolicy
from ..engine.decisions import History, Learner, PlaybookSet, PlaybookSpec, UserContext
from ..interventions.models import Intervention
from ..learning import service as learning
from ..playbooks import service as playbooks
from ..playbooks.models import Playbook
from ..tenants import config as tenant_config
from ..uow import uow_of

# what counts toward a playbook's own repeat limits (docs/decisions.md, "Steps and verdicts"):
# what a user actually got or will get, and the playbook's escalations of the user to the
# team, whatever became of them (open, handled, delegated), so an escalation playbook does
# not escalate the same user on every sweep
COUNTED = ("planned", "approved", "sent", "delivered", "failed", "open", "handled", "delegated")
# what the contact policy counts (docs/decisions.md, "Contact policy"): contacts made or waiting
# for approval; not failed, shadow, held_out (but see `history`), rejected, rolled back
CONTACTS = ("planned", "approved", "sent", "delivered")


def specs(session: Session, active: list[Playbook] | None = None) -> PlaybookSet:
    """The tenant's active playbooks, compiled: once per process for as long as the same
    playbooks are active, none is edited (every update moves its revision) and no success
    rate moves."""
    rates = playbooks.success_rates(session)
    rows = active if active is not None else playbooks.active(session)
    key = (uow_of(session).tenant_id,) + tuple((p.id, p.revision, rates.get(p.id)) for p in rows)
    return PlaybookSet.cached(key, lambda: [
        PlaybookSpec(p.id, p.name, p.entry_conditions or {}, p.exit_conditions or {}, p.constraints or {},
                     p.strategy_hints or {}, rates.get(p.id), p.lifecycle_area) for p in rows])


def event_counts(session: Session, user_id: str, clauses: set, now: datetime) -> dict:
    """Every (event name, within_days) count the trees ask for, in one query."""
    if not clauses:
        return {}
    ordered = sorted(clauses, key=lambda c: (c[0], c[1] or 0))
    columns = []
    for name, within in ordered:
        cond = Event.event == name
        if within is not None:
            cond = and_(cond, Event.timestamp >= now - timedelta(days=within))
        columns.append(func.count().filter(cond))
    names = sorted({name for name, _ in ordered})
    row = session.execute(select(*columns).where(Event.user_id == user_id, Event.event.in_(names))).one()
    return dict(zip(ordered, row))


def user_context(session: Session, customer: Customer, specs_: PlaybookSet, now: datetime) -> UserContext:
    counts = event_counts(session, customer.id, specs_.event_clauses, now)
    facts = conditions.Facts(
        values={f: getattr(customer, f) for f in conditions.COLUMN_FIELDS}, traits=customer.traits or {},
        last_activity_at=customer.last_activity_at, created_at=customer.created_at, now=now,
        event_count=lambda name, within: counts.get((name, within), 0))
    tz = (customer.traits or {}).get("timezone")
    return UserContext(customer.id, facts, email=customer.email, timezone=tz if isinstance(tz, str) else None,
                       opted_out=frozenset(customer.opted_out or []))


def policy_of(config: tenant_config.TenantConfig) -> ContactPolicy | None:
    """The tenant's contact policy, from its typed config (a stored one that does not
    validate: none)."""
    configured = config.contact_policy
    return ContactPolicy.of(configured.model_dump(exclude_none=True)) if configured else None


def history(session: Session, user_id: str, now: datetime, *, live_only: bool = False,
            held_out: bool = False, policy: ContactPolicy | None = None) -> History:
    """What the user and the tenant received; `live_only` leaves test interventions out, so
    a test run never uses up a live decision's repeat limits (docs/api.md, "Test mode").
    Held-out decisions are no contact and never count, except that a user still held out
    has their own paced like contacts (`held_out`: docs/decisions.md, "Holdout and uplift").
    With a contact `policy`, the user's contacts of every playbook and channel that it
    counts, back as far as it looks."""
    scope = [Intervention.playbook_id.isnot(None)]
    if live_only:
        scope.append(Intervention.test.is_(False))
    counted = [*scope, Intervention.status.in_(COUNTED)]
    own = [*scope, Intervention.status.in_(COUNTED + ("held_out",))] if held_out else counted
    mine = session.execute(
        select(Intervention.playbook_id, func.count(), func.max(Intervention.planned_at))
        .where(Intervention.user_id == user_id, *own)
        .group_by(Intervention.playbook_id)).all()
    day = session.execute(
        select(Intervention.playbook_id, func.count())
        .where(*counted, Intervention.planned_at >= now - timedelta(hours=24))
        .group_by(Intervention.playbook_id)).all()
    return History(for_user={p: n for p, n, _ in mine}, last_for_user={p: last for p, _, last in mine if last},
                   last_day=dict(day), policy=policy,
                   contacts=contacts(session, user_id, now, policy, live_only=live_only, held_out=held_out))


def contacts(session: Session, user_id: str, now: datetime, policy: ContactPolicy | None, *,
             live_only: bool, held_out: bool) -> tuple[Contact, ...]:
    """The user's contacts the policy counts: messages on any channel (escalations are to
    the team, not the user), engine-made or not, timed by when they were sent or, not sent
    yet, decided. Held-out decisions count only while the user is still held out, as for
    the repeat limits."""
    if policy is None:
        return ()
    at = func.coalesce(Intervention.sent_at, Intervention.planned_at)
    statuses = CONTACTS + ("held_out",) if held_out else CONTACTS
    where = [Intervention.user_id == user_id, Intervention.status.in_(statuses),
             Intervention.channel != "escalate", at >= now - policy.lookback]
    if live_only:
        where.append(Intervention.test.is_(False))
    rows = session.execute(select(at, Intervention.channel).where(*where).order_by(at.desc()).limit(1000)).all()
    return tuple(Contact(when, channel) for when, channel in rows)


def learner(session: Session, customer: Customer, specs_: PlaybookSet, decision_features: list[str]) -> Learner:
    """The learner's view of this user: features and the counts of the playbook choice
    and of each playbook's channel choice, in one query (docs/decisions.md, "Learning")."""
    features = learning.features_of(customer, decision_features)
    scopes = ["playbook"] + [f"channel:{pb.id}" for pb in specs_
                             if len((pb.constraints or {}).get("channels") or []) > 1]
    return Learner(features, learning.counts_by_scope(session, scopes, features), learning.RANDOM)
