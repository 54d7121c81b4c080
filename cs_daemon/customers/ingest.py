"""The one ingest path: the track API, the three connectors, external custom events and
`cs events import` all end here. One transaction per batch:

1. users new to the tenant are created (within `tracked_user_limit`; events of users
   past it are counted in `over_limit` and not stored);
2. events are inserted with ON CONFLICT DO NOTHING on (tenant, idempotency_key), so a
   key seen before (even in a racing request) is dropped and counted in `duplicates`;
3. only users that got new events are re-scored, from their running state (never from
   their whole history), and a stage or risk change is written to the outbox.

Without a tracked-user limit, users are created after the events and only for events
really stored, so a replayed batch writes nothing at all. On PostgreSQL a batch is two
statements (bulk.py): the first inserts the events, creates the users they name that
are new (without a limit) and locks and reads the others, with who follows the tenant's
changes; the second writes the re-scored users, the score snapshots of the days that
ended since they were last scored (snapshots.py) and the outbox rows of their changes. A replay ends after the first. A tracked-user limit adds the
reads and writes of its seats before them, open interventions the outcome checks after
(the outbox rows then follow those), active playbooks the decision requests, active
webhook endpoints the deliveries. SQLite runs the same steps statement by statement.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from .. import domain_events, metrics
from ..engine import scoring
from ..outbox import service as outbox
from ..tenants import config as tenant_config
from ..tenants.models import Tenant
from ..uow import uow_of
from . import bulk, snapshots
from .models import Customer
from .state import TRAIT_EVENTS, apply_traits, rescore


@dataclass
class Incoming:
    user_id: str
    event: str
    properties: dict[str, Any] = field(default_factory=dict)
    timestamp: datetime | None = None
    idempotency_key: str | None = None
    # False for an event stored beside one the caller sent, as part of it (the `$identify`
    # an Amplitude event's user_properties make): the counts are of the caller's events
    counted: bool = True


@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: int = 0
    over_limit: int = 0
    users_upserted: int = 0
    user_ids: list[str] = field(default_factory=list)


def _count(result: IngestResult) -> None:
    metrics.bump(metrics.EVENTS, result.accepted, outcome="accepted")
    metrics.bump(metrics.EVENTS, result.duplicates, outcome="duplicate")
    metrics.bump(metrics.EVENTS, result.over_limit, outcome="over_limit")


def ingest(session: Session, tenant_id: str, events: list[Incoming], *, source: str,
           test: bool, now: datetime) -> IngestResult:
    result = IngestResult()
    events, result.duplicates = _drop_repeats_in_batch(events)
    limit, config = _limit_and_config(session, tenant_id)
    blocked, created = (set(), []) if limit is None else reserve_customers(
        session, tenant_id, list(dict.fromkeys(e.user_id for e in events)), test=test, now=now)
    kept = [e for e in events if e.user_id not in blocked] if blocked else events
    counted = _counted(kept)
    result.over_limit = _counted(events) - counted if blocked else 0
    stored, result.accepted = _store(session, tenant_id, kept, source=source, test=test, now=now,
                                     create=limit is None, all_counted=counted == len(kept))
    result.duplicates += counted - result.accepted
    if created:
        _drop_users_without_events(session, tenant_id, created, stored.inserted)
    _count(result)
    if stored.inserted:
        if stored.created:
            _forget_count(session, tenant_id)
        touched, followers = update_customers(session, tenant_id, stored.inserted, now=now, test=test, config=config,
                                              loaded=(stored.customers, stored.followers))
        result.user_ids = list(touched)
        result.users_upserted = len(touched)
        if followers.playbooks:
            domain_events.publish(session, domain_events.EventsIngested(tenant_id, touched, now, test))
    return result


def _limit_and_config(session: Session, tenant_id: str) -> tuple[int | None, dict]:
    """The tenant's tracked-user limit and scoring config: from the row authentication
    read in this transaction when there is one (the key memo's columns need not become
    an ORM row for it), else read."""
    known = uow_of(session).tenant_columns(tenant_id, "tracked_user_limit", "config")
    if known is not None:
        return known[0], tenant_config.scoring_of(known[1])
    row = session.execute(select(Tenant.tracked_user_limit, Tenant.config).where(Tenant.id == tenant_id)).one()
    return row.tracked_user_limit, tenant_config.scoring_of(row.config)


def _counted(events: list[Incoming]) -> int:
    return sum(1 for e in events if e.counted)


def _drop_repeats_in_batch(events: list[Incoming]) -> tuple[list[Incoming], int]:
    """The events without those repeating a key seen earlier in the batch, and how many
    of the dropped ones count."""
    seen: set[str] = set()
    kept = []
    dropped = 0
    for e in events:
        key = e.idempotency_key
        if key is not None:
            if key in seen:
                dropped += e.counted
                continue
            seen.add(key)
        kept.append(e)
    return kept, dropped


def users_past_limit(session: Session, tenant_id: str, user_ids: list[str], *, test: bool,
                     now: datetime) -> set[str]:
    """On a tenant with a tracked-user limit, the users new to it that the limit leaves
    out, the others created (their seats taken); none on a tenant without one."""
    if _limit_and_config(session, tenant_id)[0] is None:
        return set()
    return reserve_customers(session, tenant_id, list(dict.fromkeys(user_ids)), test=test, now=now)[0]


def reserve_customers(session: Session, tenant_id: str, user_ids: list[str], *, test: bool,
                      now: datetime) -> tuple[set[str], list[str]]:
    """Create the users not yet known, within the tenant's tracked-user limit. Returns the
    users that could not be created (past the limit) and those this call created (not
    those a racing request created meanwhile)."""
    if not user_ids:
        return set(), []
    known = bulk.known(session, tenant_id, user_ids)
    new = [u for u in user_ids if u not in known]
    if not new:
        return set(), []
    allowed, blocked = _within_limit(session, tenant_id, new)
    created = bulk.create(session, tenant_id, allowed, test=test, now=now) if allowed else []
    if len(created) < len(allowed):   # a racing request created some: give their seats back
        _count_users(session, tenant_id, len(created) - len(allowed))
    return blocked, created


def _drop_users_without_events(session: Session, tenant_id: str, created: list[str], inserted: list[dict]) -> None:
    """A user is made by its first event: one created ahead of its events (for its seat)
    whose every event was a duplicate is not kept, and its seat is given back."""
    kept = {row["user_id"] for row in inserted}
    unused = [u for u in created if u not in kept]
    if unused:
        session.execute(delete(Customer).where(Customer.tenant_id == tenant_id, Customer.id.in_(unused)))
        _count_users(session, tenant_id, -len(unused))


def _count_users(session: Session, tenant_id: str, delta: int) -> None:
    bulk.count_users(session, tenant_id, delta)
    _forget_count(session, tenant_id)


def _forget_count(session: Session, tenant_id: str) -> None:
    # a row the key memo remembered and not yet made has no count to forget (never remembered)
    tenant = uow_of(session).tenant_made
    if isinstance(tenant, Tenant) and tenant.id == tenant_id:
        session.expire(tenant, ["tracked_users"])


def _within_limit(session: Session, tenant_id: str, new: list[str]) -> tuple[list[str], set[str]]:
    """Reserve seats for new users with one conditional UPDATE (no row lock taken ahead of
    the inserts, whose foreign-key checks share-lock the tenant row: that order
    deadlocked under load). Returns (users that fit, users past the limit)."""
    limit = session.scalar(select(Tenant.tracked_user_limit).where(Tenant.id == tenant_id))
    if limit is None:
        _count_users(session, tenant_id, len(new))
        return new, set()
    for count in range(len(new), 0, -1):
        done = session.execute(update(Tenant).where(Tenant.id == tenant_id,
                                                    Tenant.tracked_users + count <= Tenant.tracked_user_limit)
                               .values(tracked_users=Tenant.tracked_users + count).returning(Tenant.id)
                               .execution_options(keeps_credentials=True)).first()
        if done:
            return new[:count], set(new[count:])
    return [], set(new)


def _store(session: Session, tenant_id: str, events: list[Incoming], *, source: str, test: bool,
           now: datetime, create: bool, all_counted: bool) -> tuple[bulk.Stored, int]:
    """The events stored with their users (bulk.store), and how many of them count (are
    events the caller sent); `all_counted`: whether every one of `events` counts (as
    every event of the track API does)."""
    rows = [{"user_id": e.user_id, "event": e.event, "properties": e.properties or {},
             "timestamp": e.timestamp or now, "idempotency_key": e.idempotency_key} for e in events]
    if not rows:
        return bulk.Stored([], [], bulk.Followers(False, False, False)), 0
    stored = bulk.store(session, tenant_id, rows, source=source, test=test, now=now, create=create)
    if len(stored.inserted) > 1:   # in the order sent (bulk stores them in key order): of two events
        sent = {id(row): i for i, row in enumerate(rows)}   # at one time, the later one applies last
        stored.inserted.sort(key=lambda row: sent[id(row)])
    if all_counted:   # each row inserted is one event, and each counts (duplicates dropped or not)
        return stored, len(stored.inserted)
    kept = {id(row) for row in stored.inserted}   # bulk returns the very row dicts it was given
    return stored, sum(1 for e, row in zip(events, rows) if e.counted and id(row) in kept)


_timestamp = itemgetter("timestamp")


def update_customers(session: Session, tenant_id: str, inserted: list[dict], *, now: datetime, test: bool,
                     config: dict | None = None,
                     loaded: tuple[list[bulk.CustomerRow], bulk.Followers] | None = None,
                     ) -> tuple[dict[str, tuple[set[str], bool]], bulk.Followers]:
    """Fold the new events into each user's state and re-score; outbox on changes.
    `loaded`: the users' rows, locked, and the followers, when the caller read them
    (bulk.store). Returns, per user, the event names received and whether stage or risk
    changed; and who follows the tenant's changes."""
    by_user: dict[str, list[dict]] = defaultdict(list)
    for row in inserted:
        by_user[row["user_id"]].append(row)
    if config is None:
        config = tenant_config.scoring_of(session.scalar(select(Tenant.config).where(Tenant.id == tenant_id)))
    customers, followers = loaded or bulk.lock(session, tenant_id, sorted(by_user))
    rules = scoring.Rules.of(config)
    changes: list[tuple[str, dict]] = []
    touched: dict[str, tuple[set[str], bool]] = {}
    ended = snapshots.ended(customers, now=now)
    for customer in customers:
        rows = sorted(by_user[customer.id], key=_timestamp)
        for row in rows:
            if row["event"] in TRAIT_EVENTS:   # no other event sets a trait: no call for them
                apply_traits(customer, row["event"], row["properties"])
        state = scoring.UserState.from_json(customer.state)
        if state.first_seen_at is None and not customer.state:
            state.first_seen_at = min(customer.created_at, rows[0]["timestamp"])
        scoring.apply_events(state, [scoring.Event(r["event"], r["timestamp"]) for r in rows], rules)
        changed = rescore(customer, state, rules, now)
        changes += changed
        touched[customer.id] = ({r["event"] for r in rows}, bool(changed))
    # The outcomes (settled by the handler of EventsStored) come before the outbox rows of
    # the changes (their order since the start); without open interventions the outbox rows
    # go with the customers' update, and OutboxRowsWritten has their webhooks made.
    out = [] if followers.open_interventions else outbox.rows_of(tenant_id, changes, now=now, test=test)
    _write(session, tenant_id, customers, ended, out, now=now, test=test)
    _forget_loaded(session, tenant_id, customers)
    if followers.open_interventions:
        domain_events.publish(session, domain_events.EventsStored(
            tenant_id, [(r["user_id"], r["event"], r["timestamp"]) for r in inserted], now, test))
        outbox.record_many(session, tenant_id, changes, now=now, test=test, fan_out=followers.endpoints)
    elif out and followers.endpoints:
        domain_events.publish(session, domain_events.OutboxRowsWritten(tenant_id, out, now, test))
    return touched, followers


def _write(session: Session, tenant_id: str, customers: list[bulk.CustomerRow], ended: list[str],
           out: list[dict], *, now: datetime, test: bool) -> None:
    """The users' new columns, the score snapshots of the users `ended` (snapshots.ended:
    their rows' scores before this write) and the outbox rows `out`: on PostgreSQL one
    statement (the update with the others as CTEs)."""
    if bulk.postgres(session):
        bulk.write(session, tenant_id, customers, test=test,
                   also=[snapshots.pg_part(tenant_id, ended)] * bool(ended)
                   + [outbox.pg_part(tenant_id, out, now=now, test=test)] * bool(out))
        return
    snapshots.write(session, tenant_id, ended)
    bulk.write(session, tenant_id, customers, test=test)
    if out:
        outbox.insert_rows(session, out)


def _forget_loaded(session: Session, tenant_id: str, customers: list[bulk.CustomerRow]) -> None:
    """Customers this session holds as objects are stale after the bulk write: expire them."""
    if not any(key[0] is Customer for key in session.identity_map.keys()):
        return
    for c in customers:
        loaded = session.identity_map.get(session.identity_key(Customer, (tenant_id, c.id)))
        if loaded is not None:
            session.expire(loaded)
