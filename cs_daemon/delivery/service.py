"""The one delivery mechanism for everything that leaves the service signed.

A delivery is a row before it is a message: `create` writes it in the caller's
transaction and publishes `DeliveryDue`, whose handler (delivery/actors.py, registered
by cs_daemon/wiring.py) enqueues it after commit (the deliveries of one transaction
travel in job messages of up to BATCH each; each is still claimed, sent and recorded on
its own). `attempt` claims the row with a conditional UPDATE (so two copies of a message
make one attempt, and a delivered row is never sent again), sends outside any
transaction, then records the attempt and schedules the next one from the row
(`DeliveryRetryDue`, enqueued with its delay after commit). Right before sending, the
kind's guard may still hold it back (an intervention paused or rolled back since); a
delivery cancelled while its attempt was out stays cancelled, whatever the attempt
found. A periodic sweep re-enqueues whatever is due, so a lost message, a killed worker
or a restart only delays a delivery. Retries follow the previous attempt by 30 s, 2 min,
10 min, 30 min and 2 h; the sixth failure is final, and so is one the channel calls
permanent (`Outcome.permanent`, e.g. a mailbox the SMTP server refuses).

Each delivery names the channel that sends it (`channel`: webhook, crm, email, in_app,
sink; docs/architecture.md, "The channel interface"); the attempt is that channel's
`send`. Its URL is only the address, as the log shows it.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable

from sqlalchemy import bindparam, insert, literal, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from sqlalchemy.orm import Session

from .. import crypto, domain_events, metrics
from ..channels import base as channels
from ..db import locked, new_id
from ..errors import InvalidState, NotFound, present
from ..integrations import http
from ..tenants.models import Tenant
from . import slow_receivers, states
from .models import Delivery, DeliveryAttempt

log = logging.getLogger(__name__)
RETRY_DELAYS = (timedelta(seconds=30), timedelta(minutes=2), timedelta(minutes=10),
                timedelta(minutes=30), timedelta(hours=2))
MAX_ATTEMPTS = len(RETRY_DELAYS) + 1
DEADLINE_SECONDS = 10.0        # the whole attempt: connect, send, answer
LEASE = timedelta(seconds=20)   # longer than one attempt can take
OPEN = states.OPEN

# kind -> callback(session, delivery, outcome, final) run in the recording transaction,
# so a domain can follow its deliveries (deactivate an endpoint on 410, mark an
# intervention delivered, ...); `when(outcome, final)` limits it to the attempts it cares
# about, so the others need no ORM load.
Listener = Callable[[Session, Delivery, http.Outcome, bool], None]
When = Callable[[http.Outcome, bool], bool]
LISTENERS: dict[str, list[tuple[Listener, When | None]]] = {}
# kind -> lock(session, subject_id): what the listeners change is locked before the
# delivery row is settled, the order in which a pause or rollback takes them
LOCK_FIRST: dict[str, Callable[[Session, str], None]] = {}

# kind -> guard(session, subject_id) -> why not (None: send), asked right before an
# attempt leaves, so work withdrawn after it was claimed stays home
Guard = Callable[[Session, str], str | None]
GUARDS: dict[str, Guard] = {}

# "ref:<name>" secrets are read at send time (e.g. the tenant's CRM secret in its config)
SecretRef = Callable[[Session, str], str]
SECRET_REFS: dict[str, SecretRef] = {}


def listen(kind: str, fn: Listener, *, when: When | None = None,
           lock_first: Callable[[Session, str], None] | None = None) -> None:
    LISTENERS.setdefault(kind, []).append((fn, when))
    if lock_first is not None:
        LOCK_FIRST[kind] = lock_first


def encode(body: dict) -> str:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def create(session: Session, tenant_id: str, *, kind: str, channel: str, url: str, body: dict, secret_enc: str,
           event_type: str, now: datetime, endpoint_id: str | None = None,
           subject_id: str | None = None, headers: dict | None = None, test: bool = False,
           max_attempts: int = MAX_ATTEMPTS, enqueue: bool = True) -> Delivery:
    """Write the delivery; after commit, a job sends it (`DeliveryDue`; unless the caller
    sends it itself with `attempt`, as the endpoint test does). `channel` is the registered
    channel that sends it."""
    delivery = Delivery(
        tenant_id=tenant_id, kind=kind, channel=channel, url=url, body=encode(body), secret_enc=secret_enc,
        event_type=event_type, endpoint_id=endpoint_id, subject_id=subject_id,
        headers=headers or {}, test=test, max_attempts=max_attempts, status=states.PENDING,
        next_attempt_at=now, created_at=now, updated_at=now,
    )
    session.add(delivery)
    session.flush()
    if enqueue:
        domain_events.publish(session, domain_events.DeliveryDue(delivery.id))
    return delivery


BATCH = 10      # deliveries a job message carries: fewer broker round trips, still spread over threads


@dataclass(frozen=True)
class Claimed:
    id: str
    tenant_id: str
    kind: str
    url: str
    body: str
    headers: dict
    secret_enc: str
    subject_id: str | None
    number: int
    lease_until: datetime
    max_attempts: int = MAX_ATTEMPTS
    channel: str = "webhook"      # the registered channel whose `send` makes the attempt


# Claiming and recording are the hot path of every delivery: fixed Core statements (built
# once, compiled once), a claim in one round trip outside any transaction, and on
# PostgreSQL a record in one more: the log row a CTE of the statement that settles the
# delivery, both on a bare connection (Runtime.statements), inside a unit of work only
# where a retry's message, a listener or a lock must share its transaction; the ORM only
# where a listener wants the delivery (docs/webhooks.md, "What an attempt costs the
# database").
_deliveries, _attempts, _tenants = Delivery.__table__, DeliveryAttempt.__table__, Tenant.__table__
_d = _deliveries.c
# `status IN` as plain parameters: a list would be an expanding parameter, whose SQL is
# rendered again at each execution
_IS_OPEN = _d.status.in_([literal(s) for s in OPEN])
_CLAIM = (update(_deliveries)
          .where(_d.id == bindparam("did"), _IS_OPEN, _d.next_attempt_at <= bindparam("now"),
                 or_(_d.locked_until.is_(None), _d.locked_until <= bindparam("now")),
                 _d.tenant_id.notin_(select(_tenants.c.id).where(_tenants.c.kill_switch_active.is_(True))))
          .values(locked_until=bindparam("lease"))
          .returning(_d.id, _d.tenant_id, _d.kind, _d.url, _d.body, _d.headers, _d.secret_enc, _d.subject_id,
                     _d.attempts, _d.max_attempts, _d.channel))
_LOG = insert(_attempts).values(   # parameters named apart from the columns, as Core requires
    id=bindparam("attempt_id"), tenant_id=bindparam("tenant"), delivery_id=bindparam("did"),
    number=bindparam("attempt_no"), at=bindparam("sent_at"), status_code=bindparam("code"),
    latency_ms=bindparam("latency"), error=bindparam("failure"), response_excerpt=bindparam("excerpt"))
# a claimed delivery given back unattempted (slow_receivers.py): the lease let go, due again later
_DEFER = (update(_deliveries)
          .where(_d.id == bindparam("did"), _d.locked_until == bindparam("lease"), _IS_OPEN)
          .values(locked_until=None, next_attempt_at=bindparam("next_at")))


def _settle(**values):
    """The state an attempt leaves its delivery in, written only while the lease is ours
    (the fence: a replay or a later attempt took it over) and the delivery is still open
    (a pause or rollback cancelled it meanwhile: cancelled it stays, never retried)."""
    return (update(_deliveries).where(_d.id == bindparam("did"), _d.locked_until == bindparam("lease"),
                                      _IS_OPEN)
            .values(attempts=bindparam("attempt_no"), locked_until=None, updated_at=bindparam("at_now"), **values)
            .returning(_d.id))


_SETTLE = {states.DELIVERED: _settle(status=states.DELIVERED, delivered_at=bindparam("at_now"), next_attempt_at=None),
           states.FAILED: _settle(status=states.FAILED, next_attempt_at=None),
           states.RETRYING: _settle(status=states.RETRYING, next_attempt_at=bindparam("next_at"))}


# PostgreSQL: the attempt logged and its delivery settled in one statement (the log row
# is written whether or not the fence lets the settle through)
_LOG_AND_SETTLE = {status: stmt.add_cte(_LOG.cte("logged")) for status, stmt in _SETTLE.items()}


def _held():
    """Tenants whose kill switch holds everything back."""
    return select(Tenant.id).where(Tenant.kill_switch_active.is_(True))


def claim(conn: Connection, delivery_id: str, now: datetime) -> Claimed | None:
    """Take the lease on a due, open delivery; None when it is done, not due, leased, or
    held by its tenant's kill switch (it is sent once the switch is off)."""
    row = conn.execute(_CLAIM, {"did": delivery_id, "now": now, "lease": now + LEASE}).first()
    if row is None:
        return None
    return Claimed(row.id, row.tenant_id, row.kind, row.url, row.body, row.headers, row.secret_enc,
                   row.subject_id, row.attempts + 1, now + LEASE, row.max_attempts, row.channel)


def secret_of(rt, claimed: Claimed) -> str:
    if claimed.secret_enc.startswith("ref:"):
        with rt.session(claimed.tenant_id) as session:
            return SECRET_REFS[claimed.secret_enc[4:]](session, claimed.tenant_id)
    if not claimed.secret_enc:
        return ""
    return crypto.decrypt(rt.settings.secret_key, claimed.secret_enc)


def send(rt, claimed: Claimed, now: datetime) -> http.Outcome:
    """One attempt through the delivery's channel, unless its guard holds it back."""
    refused = _unwanted(rt, claimed)
    if refused:
        return http.Outcome(None, None, refused, 0.0, permanent=True)
    try:
        channel = channels.get(claimed.channel)
    except LookupError as exc:      # a row of a channel this service no longer has
        return http.Outcome(None, None, str(exc), 0.0, permanent=True)
    try:
        secret = secret_of(rt, claimed)
    except Exception as exc:  # a secret that cannot be read fails the attempt, visibly
        return http.Outcome(None, None, f"signing secret unavailable: {type(exc).__name__}: {exc}", 0.0)
    return channel.send(claimed, secret, rt, now)


def _unwanted(rt, claimed: Claimed) -> str | None:
    guard = GUARDS.get(claimed.kind)
    if guard is None or claimed.subject_id is None:
        return None
    with rt.session(claimed.tenant_id) as session:
        return guard(session, claimed.subject_id)


def record(session: Session, claimed: Claimed, outcome: http.Outcome, *, at: datetime,
           now: datetime, attempt_id: str | None = None) -> str | None:
    """Log the attempt and move the delivery on (delivered, retrying at the next step of
    the schedule, or failed for good), with what follows it in the same transaction (the
    next attempt's message, the kind's listeners); returns the new status, or None when
    the lease ran out and another attempt took over, or the delivery was cancelled
    meanwhile (this one is logged, the state left as it is)."""
    lock_first = LOCK_FIRST.get(claimed.kind)
    if lock_first is not None and claimed.subject_id is not None:
        lock_first(session, claimed.subject_id)
    status = _logged(session.connection(), claimed, outcome, at=at, now=now, attempt_id=attempt_id)
    if status is None:
        return None
    if status == states.RETRYING:
        domain_events.publish(session, domain_events.DeliveryRetryDue(claimed.id, _next_at(claimed, at) - at))
    wanted = _wanted(claimed, outcome, status)
    if wanted:
        delivery = session.get(Delivery, claimed.id)
        for listener in wanted:
            listener(session, delivery, outcome, status != states.RETRYING)
    return status


def _logged(conn: Connection, claimed: Claimed, outcome: http.Outcome, *, at: datetime, now: datetime,
            attempt_id: str | None) -> str | None:
    """The attempt logged and its delivery settled, behind the lease's fence: the status,
    or None (logged, not settled)."""
    status = _status(claimed, outcome)
    settled = _log_and_settle(conn, status, {
        "attempt_id": attempt_id or new_id(), "tenant": claimed.tenant_id, "did": claimed.id,
        "attempt_no": claimed.number, "sent_at": at, "code": outcome.status_code, "latency": outcome.latency_ms,
        "failure": outcome.error, "excerpt": outcome.excerpt, "lease": claimed.lease_until,
        "at_now": now, "next_at": _next_at(claimed, at) if status == states.RETRYING else None})
    if settled is None:
        log.warning("delivery %s: attempt %s not settled: cancelled meanwhile, or it outlived its lease",
                    claimed.id, claimed.number)
        return None
    return status


def _next_at(claimed: Claimed, at: datetime) -> datetime:
    return at + RETRY_DELAYS[min(claimed.number, len(RETRY_DELAYS)) - 1]


def _status(claimed: Claimed, outcome: http.Outcome) -> str:
    """The status this attempt leaves its delivery in."""
    if outcome.ok:
        return states.DELIVERED
    if outcome.permanent or claimed.number >= claimed.max_attempts:
        return states.FAILED
    return states.RETRYING


def _wanted(claimed: Claimed, outcome: http.Outcome, status: str) -> list[Listener]:
    final = status != states.RETRYING
    return [fn for fn, when in LISTENERS.get(claimed.kind, []) if when is None or when(outcome, final)]


def _log_and_settle(conn: Connection, status: str, params: dict):
    """The settled delivery's row (None when the fence held), the attempt logged either way:
    one statement on PostgreSQL; two on SQLite, whose CTEs cannot write."""
    if conn.dialect.name == "postgresql":
        return conn.execute(_LOG_AND_SETTLE[status], params).first()
    conn.execute(_LOG, params)
    return conn.execute(_SETTLE[status], params).first()


def _alone(rt, claimed: Claimed, outcome: http.Outcome) -> bool:
    """Whether the record is one statement and nothing more: on PostgreSQL, when no lock
    is taken first, no listener joins in and no retry is to be scheduled."""
    if rt.settings.is_sqlite or (claimed.kind in LOCK_FIRST and claimed.subject_id is not None):
        return False
    status = _status(claimed, outcome)
    return status != states.RETRYING and not _wanted(claimed, outcome, status)


SLOW = slow_receivers.SlowReceivers()   # this process's attempts in flight, by tenant
DEFER = timedelta(seconds=5)            # a deferred delivery is due again this much later


def attempt(rt, delivery_id: str, *, paced: bool = True) -> str | None:
    """Claim, send and record one attempt (the body of the send job); the status it left
    the delivery in, or None when there was nothing to attempt, or when its tenant's slow
    receivers already hold their share of this process (deferred, slow_receivers.py).
    `paced=False`: an attempt someone asked for and waits on (a replay, a test send),
    never deferred."""
    started = rt.now()
    with rt.statements() as conn:
        claimed = claim(conn, delivery_id, started)
    if claimed is None:
        return None
    flying = SLOW.enter(claimed.tenant_id, always=not paced)
    if flying is None:
        _defer(rt, claimed, started + DEFER)
        return None
    try:
        outcome = send(rt, claimed, started)
    finally:
        SLOW.leave(claimed.tenant_id, flying)
    status = record_surely(rt, claimed, outcome, at=started)
    metrics.bump(metrics.DELIVERIES, channel=_channel_of(claimed), status=status or "superseded")
    return status


def _defer(rt, claimed: Claimed, until: datetime) -> None:
    with rt.statements() as conn:
        conn.execute(_DEFER, {"did": claimed.id, "lease": claimed.lease_until, "next_at": until})
    metrics.bump(metrics.DELIVERIES, channel=_channel_of(claimed), status="deferred")
    log.debug("delivery %s deferred: its tenant's receivers are slow and %d of its attempts are in flight here",
             claimed.id, slow_receivers.SLOW_TENANT_SENDS)


CHANNEL_HEADER = "X-Service-Channel"   # an intervention's deliveries name their channel (email, in_app, ...)


def _channel_of(claimed: Claimed) -> str:
    """The metric's channel: an intervention's delivery names it, any other goes by its kind."""
    return claimed.headers.get(CHANNEL_HEADER) or claimed.kind
RECORD_PATIENCE = 60.0   # seconds an attempt that went out waits for the database to take its record


def record_surely(rt, claimed: Claimed, outcome: http.Outcome, *, at: datetime) -> str | None:
    """Record an attempt that went out, waiting out a database that is unreachable for a
    while (a restart, a failover): a lost record would leave the delivery open, and it
    would be sent again once its lease ran out although the receiver has it. The
    attempt's log row has its id before the first try, so a commit that went through
    but whose answer was lost is found by the next try (the row exists) and not made
    twice. Past RECORD_PATIENCE the error is raised: the lease and the sweep send the
    delivery again, at least once as ever (docs/webhooks.md)."""
    attempt_id, pause, waited = new_id(), 0.2, 0.0
    while True:
        try:
            if _alone(rt, claimed, outcome):
                with rt.statements() as conn:
                    return _logged(conn, claimed, outcome, at=at, now=rt.now(), attempt_id=attempt_id)
            with rt.session() as session:
                return record(session, claimed, outcome, at=at, now=rt.now(), attempt_id=attempt_id)
        except IntegrityError:
            if _recorded(rt, attempt_id):
                return None     # the earlier try committed; only its answer was lost
            raise
        except (OperationalError, InterfaceError) as exc:
            if waited >= RECORD_PATIENCE:
                raise
            log.warning("delivery %s: attempt %s not recorded yet, database unreachable (%s); trying again in %.1f s",
                        claimed.id, claimed.number, type(exc).__name__, pause)
            time.sleep(pause)
            waited += pause
            pause = min(pause * 2, 2.0)


def _recorded(rt, attempt_id: str) -> bool:
    with rt.session() as session:
        return session.get(DeliveryAttempt, attempt_id) is not None


def due(session: Session, now: datetime, limit: int = 500, *, grace: timedelta = timedelta(0)) -> list[str]:
    """Open deliveries due by `now - grace` (the sweep's grace skips rows whose own message
    is still on its way) and not leased."""
    return list(session.scalars(
        select(Delivery.id)
        .where(Delivery.status.in_(OPEN), Delivery.next_attempt_at <= now - grace,
               or_(Delivery.locked_until.is_(None), Delivery.locked_until <= now),
               Delivery.tenant_id.notin_(_held()))
        .order_by(Delivery.next_attempt_at).limit(limit)
    ))


def cancel(session: Session, *, subject_id: str, kind: str, now: datetime) -> int:
    """Stop the open deliveries of a subject (a paused or rolled-back intervention). One
    being attempted right now keeps its lease, but its result cannot reopen it (`_settle`)."""
    rows = session.scalars(select(Delivery).where(Delivery.subject_id == subject_id, Delivery.kind == kind,
                                                  Delivery.status.in_(OPEN))).all()
    for d in rows:
        d.status, d.next_attempt_at, d.updated_at = states.CANCELED, None, now
    return len(rows)


def cancel_to_endpoint(session: Session, tenant_id: str, endpoint_id: str, *, now: datetime) -> int:
    """Stop the open deliveries to an endpoint that was deleted or answered 410 Gone: their
    retries would go to a receiver its tenant or its owner has let go (docs/webhooks.md).
    As with `cancel`, one being attempted right now cannot reopen by its result."""
    rows = session.scalars(select(Delivery).where(Delivery.tenant_id == tenant_id, Delivery.endpoint_id == endpoint_id,
                                                  Delivery.status.in_(OPEN))).all()
    for d in rows:
        d.status, d.next_attempt_at, d.updated_at = states.CANCELED, None, now
    return len(rows)


def reopen(session: Session, delivery_id: str, now: datetime) -> Delivery:
    """Allow one more attempt now (replay): same id, same body, same event id. A cancelled
    delivery stays so: what it carried was paused or rolled back."""
    delivery = locked(session, Delivery, delivery_id)
    if delivery is None:
        raise NotFound("delivery not found")
    if delivery.status not in states.FROM["replay"]:
        raise InvalidState("this delivery was cancelled (its intervention was paused or rolled back, or its "
                           "endpoint deactivated): it is not sent again")
    delivery.status = states.reopened(delivery.attempts)
    delivery.max_attempts = max(delivery.max_attempts, delivery.attempts + 1)
    delivery.next_attempt_at = now
    delivery.locked_until = None
    delivery.updated_at = now
    return delivery


def get(session: Session, delivery_id: str) -> Delivery:
    return present(session.get(Delivery, delivery_id), "delivery")


def attempts_of(session: Session, delivery_ids: list[str]) -> dict[str, list[DeliveryAttempt]]:
    out: dict[str, list[DeliveryAttempt]] = {d: [] for d in delivery_ids}
    if delivery_ids:
        for a in session.scalars(select(DeliveryAttempt).where(DeliveryAttempt.delivery_id.in_(delivery_ids))
                                 .order_by(DeliveryAttempt.number)):
            out[a.delivery_id].append(a)
    return out
