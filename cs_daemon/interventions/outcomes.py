"""Responses and outcomes of delivered interventions (docs/interventions.md, "Responses and
outcomes"), and of held-out ones (docs/decisions.md, "Holdout and uplift").

Delivery opens an intervention's attribution window: `attribution_days` of its playbook's
exit conditions (default 7) from `delivered_at` (for a held-out decision, from the moment
it is recorded; it has no response, only an outcome). While the window is open:

- the user's first event at or after the delivery is a response: `responded_at` is set
  and `user.responded` is emitted (an in-app click reported by the SDK counts too);
- the outcome is recorded as soon as it is known: `positive` once the playbook's exit
  conditions hold for the user, `negative` once the user has churned, `neutral` when the
  window closes with neither. The user's events are checked as they are ingested (the
  event that meets the exit conditions settles it in the same transaction); the outcome
  sweep checks every open window each minute, for what no event reveals (a window
  closing, conditions met before the delivery). Each outcome emits `outcome.recorded`
  and so feeds the playbook's `success_rate`, which the engine ranks by.

Every write is a conditional UPDATE, so a response or an outcome is recorded once however
many ingests, clicks or sweeps race for it, and never on an intervention rolled back
meanwhile.

The interventions of a playbook whose stored exit conditions no longer validate are held
back (no outcome is recorded for them) until the playbook is fixed: `held_back` names
those playbooks, and `cs doctor` lists what is wrong with them.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Iterable

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from .. import domain_events
from ..customers.models import Customer
from ..engine import conditions
from ..learning import service as learning
from ..outbox import service as outbox
from ..playbooks import service as playbooks
from ..playbooks.models import Playbook
from .models import Intervention

DEFAULT_ATTRIBUTION_DAYS = 7
SWEEP_BATCH = 2000
IN_CHUNK = 500
DECIDED = ("positive", "negative", "neutral")


def window(exit_conditions: dict | None) -> timedelta:
    days = exit_conditions.get("attribution_days") if isinstance(exit_conditions, dict) else None
    valid = isinstance(days, int) and not isinstance(days, bool) and 1 <= days <= 365
    return timedelta(days=days if valid else DEFAULT_ATTRIBUTION_DAYS)


def open_window(session: Session, iv: Intervention, now: datetime) -> None:
    """Called as the intervention is delivered."""
    playbook = session.get(Playbook, iv.playbook_id) if iv.playbook_id else None
    iv.attribution_until = now + window(playbook.exit_conditions if playbook else None)


# a held-out decision's window opens when it is recorded and settles by the same rules
SETTLED_FROM = ("delivered", "held_out")


def _is_open():
    return (Intervention.attribution_until.isnot(None), Intervention.outcome.is_(None),
            Intervention.status.in_(SETTLED_FROM))


# -- responses --------------------------------------------------------------------------

def note_events(session: Session, tenant_id: str, events: Iterable[tuple[str, str, datetime]], *,
                now: datetime, test: bool = False) -> tuple[int, int]:
    """`events` are (user_id, event name, timestamp) just stored, and the users' state is
    already updated by them. Each open intervention of those users without a response yet
    gets the first of its user's events at or after its delivery and inside its window
    (test-mode events answer only test interventions: docs/api.md, "Test mode"); then the
    outcomes these events made known are recorded. Returns how many responses and how
    many outcomes were recorded."""
    by_user: dict[str, list[tuple[datetime, str]]] = defaultdict(list)
    for user_id, name, at in events:
        by_user[user_id].append((at, name))
    ivs = _open_of_users(session, sorted(by_user))
    responses = 0
    for iv in ivs:
        if iv.responded_at is not None or (test and not iv.test) or iv.delivered_at is None:
            continue
        inside = sorted(e for e in by_user[iv.user_id] if iv.delivered_at <= e[0] < iv.attribution_until)
        if inside:
            at, name = inside[0]
            responses += respond(session, iv, at=at, response="event", event=name, now=now)
    return responses, settle(session, ivs, now=now)


def settle_after_ingest(session: Session, event: domain_events.EventsStored) -> None:
    """The handler of EventsStored (registered by cs_daemon/wiring.py)."""
    note_events(session, event.tenant_id, event.events, now=event.now, test=event.test)


def _open_of_users(session: Session, user_ids: list[str]) -> list[Intervention]:
    found: list[Intervention] = []
    for start in range(0, len(user_ids), IN_CHUNK):
        found += session.scalars(select(Intervention).where(
            Intervention.user_id.in_(user_ids[start:start + IN_CHUNK]), *_is_open())).all()
    return found


def respond(session: Session, iv: Intervention, *, at: datetime, response: str, event: str | None,
            now: datetime) -> bool:
    """Record the first response to a delivered intervention; False when it had one."""
    done = session.execute(update(Intervention).where(
        Intervention.id == iv.id, Intervention.tenant_id == iv.tenant_id, Intervention.responded_at.is_(None),
        Intervention.status == "delivered").values(responded_at=at)).rowcount
    if not done:
        return False
    iv.responded_at = at
    outbox.record(session, iv.tenant_id, "user.responded", {
        "user_id": iv.user_id, "intervention_id": iv.id, "playbook_id": iv.playbook_id, "channel": iv.channel,
        "response": response, "event_name": event, "responded_at": at.isoformat()}, now=now, test=iv.test)
    return True


# -- outcomes ---------------------------------------------------------------------------

def sweep(session: Session, *, now: datetime, batch: int = SWEEP_BATCH) -> int:
    """Record the outcomes now known for this tenant's open interventions (a tenant-scoped
    session). Returns how many were recorded."""
    held = [p.id for p in held_back(session)]
    query = select(Intervention).where(*_is_open())
    if held:
        query = query.where(Intervention.playbook_id.not_in(held))
    ivs = session.scalars(query.order_by(Intervention.attribution_until).limit(batch)).all()
    return settle(session, ivs, now=now)


def held_back(session: Session) -> list[Playbook]:
    """Playbooks with open interventions whose exit conditions no longer validate (a
    tenant-scoped session): their outcomes wait until the playbook is fixed."""
    with_open = select(Intervention.playbook_id).where(*_is_open(), Intervention.playbook_id.isnot(None))
    return [p for p in session.scalars(select(Playbook).where(Playbook.id.in_(with_open)))
            if not playbooks.exit_usable(p)]


def settle(session: Session, ivs: list[Intervention], *, now: datetime) -> int:
    """Record the outcome of each of these open interventions that is known now; returns
    how many were recorded."""
    if not ivs:
        return 0
    users = sorted({iv.user_id for iv in ivs})
    churned = set(_users_where(session, users, Customer.lifecycle_stage == "churned"))
    met, held = _exit_met(session, ivs, now)
    done = 0
    for iv in ivs:
        if iv.playbook_id in held:
            continue
        if (iv.playbook_id, iv.user_id) in met:
            done += record(session, iv, "positive", now=now)
        elif iv.user_id in churned:
            done += record(session, iv, "negative", now=now)
        elif iv.attribution_until <= now:
            done += record(session, iv, "neutral", now=now)
    return done


def _exit_met(session: Session, ivs: list[Intervention], now: datetime) -> tuple[set[tuple[str | None, str]], set[str]]:
    """(playbook id, user id) pairs whose playbook's exit conditions hold now, and the
    ids of playbooks held back (exit conditions that no longer validate). A playbook
    without exit conditions names no success, so none of its interventions is positive."""
    users_of: dict[str, set[str]] = defaultdict(set)
    for iv in ivs:
        if iv.playbook_id:
            users_of[iv.playbook_id].add(iv.user_id)
    rows = session.scalars(select(Playbook).where(Playbook.id.in_(list(users_of)))).all()
    held = {p.id for p in rows if not playbooks.exit_usable(p)}
    dialect = session.get_bind().dialect.name
    met = set()
    for playbook in rows:
        if playbook.id in held:
            continue
        tree = conditions.fields_of(playbook.exit_conditions)
        if not tree:
            continue
        criterion = conditions.to_sql(tree, now=now, dialect=dialect)
        met |= {(playbook.id, u) for u in _users_where(session, sorted(users_of[playbook.id]), criterion)}
    return met, held


def _users_where(session: Session, user_ids: list[str], criterion) -> list[str]:
    found: list[str] = []
    for start in range(0, len(user_ids), IN_CHUNK):
        found += session.scalars(select(Customer.id).where(
            Customer.id.in_(user_ids[start:start + IN_CHUNK]), criterion)).all()
    return found


def record(session: Session, iv: Intervention, outcome: str, *, now: datetime) -> bool:
    """Set the outcome of an open intervention and emit outcome.recorded; False when it
    was settled or rolled back meanwhile."""
    done = session.execute(update(Intervention).where(
        Intervention.id == iv.id, Intervention.tenant_id == iv.tenant_id, *_is_open())
        .values(outcome=outcome, outcome_at=now, updated_at=now)).rowcount
    if not done:
        return False
    iv.outcome, iv.outcome_at = outcome, now
    if iv.status != "held_out":     # held-out decisions emit no events and train nothing (docs/decisions.md)
        emit_recorded(session, iv, now=now)
        learning.on_intervention_outcome(session, iv, now=now)
    return True


def emit_recorded(session: Session, iv: Intervention, *, now: datetime) -> None:
    outbox.record(session, iv.tenant_id, "outcome.recorded", {
        "intervention_id": iv.id, "user_id": iv.user_id, "playbook_id": iv.playbook_id, "channel": iv.channel,
        "outcome": iv.outcome, "delivered_at": iv.delivered_at.isoformat() if iv.delivered_at else None,
        "recorded_at": now.isoformat()}, now=now, test=iv.test)


def tenants_with_open(session: Session) -> list[str]:
    """Tenants with an intervention awaiting its outcome (an unscoped session)."""
    return list(session.scalars(select(Intervention.tenant_id).where(*_is_open()).distinct()))
