"""Decisions owed after ingest, and the periodic decision sweep.

Ingest writes one request per user that received events (only when the tenant has an
active playbook), in the same transaction as the events; a job decides after commit
(`DecisionsOwed`, whose handler in decisions/actors.py sends it: this module imports no
job).
Deciding reads and writes in short transactions around the (possibly slow) message
writer: a lease is taken first, the intervention and `done_at` are written together
last, so a crash in between leaves the request open for the sweep to retry. The sweep
owes its requests the same way and decides them itself (`sweep_tenant`).

A request whose decision keeps failing backs off: after its n-th failed try it waits
RETRY_AFTER × 2^(n-1) (30 s, 1 min, 2 min, 4 min), and after MAX_ATTEMPTS tries it is
`failed` (failed_at set, the last error kept) and never taken again
(docs/decisions.md, "Owed decisions"; the statuses and their changes:
decisions/request_states.py).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import delete, exists, insert, or_, select, update
from sqlalchemy.orm import Session

from .. import domain_events
from ..customers.models import Customer
from ..db import new_id, room_for_segments
from ..engine import conditions
from ..engine.decisions import contact_limit, repeat_limit
from ..jobs.sweeps import SkippedStoredData
from ..playbooks import service as playbooks
from ..playbooks.models import Playbook
from ..tenants import service as tenants
from . import context
from . import record as recording
from .models import DecisionRequest

log = logging.getLogger(__name__)

LEASE = timedelta(minutes=2)
RETRY_AFTER = timedelta(seconds=30)
MAX_ATTEMPTS = 5
KEEP_DONE = timedelta(days=1)     # decided requests kept this long, then pruned
PRUNE_BATCH = 5_000
SWEEP_USERS_PER_TENANT = 200


def owe(session: Session, tenant_id: str, touched: dict[str, tuple[set[str], bool]], *, now: datetime,
        test: bool = False, active: bool | None = None, enqueue: bool = True) -> list[str]:
    """One decision request per touched user; after commit the job decides them
    (`DecisionsOwed`; unless `enqueue` is False: the caller decides them itself, as the
    sweep does). `active`:
    whether the tenant has an active playbook, when the caller read it in this
    transaction (ingest did); else it is read here."""
    if active is None:
        active = bool(touched) and session.scalar(select(exists().where(Playbook.tenant_id == tenant_id,
                                                                        Playbook.status == "active")))
    if not touched or not active:
        return []
    rows = [{"id": new_id(), "tenant_id": tenant_id, "user_id": user_id, "events": sorted(names),
             "state_changed": changed, "test": test, "created_at": now, "claimed_until": None, "done_at": None}
            for user_id, (names, changed) in touched.items()]
    session.execute(insert(DecisionRequest.__table__), rows)
    ids = [r["id"] for r in rows]
    if enqueue:
        domain_events.publish(session, domain_events.DecisionsOwed(ids))
    return ids


def owe_after_ingest(session: Session, event: domain_events.EventsIngested) -> None:
    """The handler of EventsIngested (registered by cs_daemon/wiring.py)."""
    owe(session, event.tenant_id, event.touched, now=event.now, test=event.test, active=True)


def _open(now: datetime) -> tuple:
    """Neither done nor failed, and free to take: not leased, or waiting out no backoff."""
    return (DecisionRequest.done_at.is_(None), DecisionRequest.failed_at.is_(None),
            or_(DecisionRequest.claimed_until.is_(None), DecisionRequest.claimed_until <= now))


def claim(session: Session, request_id: str, now: datetime) -> DecisionRequest | None:
    """Take the lease of an open request; each claim counts one try."""
    row = session.execute(
        update(DecisionRequest)
        .where(DecisionRequest.id == request_id, *_open(now))
        .values(claimed_until=now + LEASE, attempts=DecisionRequest.attempts + 1)
        .returning(DecisionRequest.id)).first()
    return session.get(DecisionRequest, request_id) if row else None


def overdue(session: Session, now: datetime, limit: int = 1000) -> list[str]:
    return list(session.scalars(
        select(DecisionRequest.id)
        .where(DecisionRequest.created_at <= now - RETRY_AFTER, *_open(now))
        .order_by(DecisionRequest.created_at).limit(limit)))


def backoff(attempts: int) -> timedelta:
    """How long a request waits after its `attempts`-th failed try."""
    return RETRY_AFTER * 2 ** (max(attempts, 1) - 1)


def failed(rt, request_id: str, attempts: int, error: str) -> None:
    """Record a failed try: wait out the backoff, or fail for good after MAX_ATTEMPTS."""
    now = rt.now()
    values = {"last_error": error[:500]}
    if attempts >= MAX_ATTEMPTS:
        values["failed_at"] = now
    else:
        values["claimed_until"] = now + backoff(attempts)
    with rt.session() as session:
        session.execute(update(DecisionRequest).where(DecisionRequest.id == request_id,
                                                      DecisionRequest.done_at.is_(None),
                                                      DecisionRequest.failed_at.is_(None)).values(**values))


def sweep_candidates(session: Session, now: datetime) -> list[str]:
    """Users of this tenant that an untriggered active playbook's entry conditions match
    (playbooks that no longer validate are left out: playbooks.service.usable)."""
    trees = [p.entry_conditions for p in playbooks.active(session) if not conditions.trigger_of(p.entry_conditions)]
    if not trees:
        return []
    dialect = session.get_bind().dialect.name
    match = or_(*[conditions.to_sql(t, now=now, dialect=dialect) for t in trees])
    room_for_segments(session)
    return list(session.scalars(select(Customer.id).where(match)
                                .order_by(Customer.updated_at.desc()).limit(SWEEP_USERS_PER_TENANT)))


def prune_done(session: Session, *, now: datetime) -> int:
    """Remove decided requests older than KEEP_DONE, across tenants, one batch: once
    decided, a request's trace holds what it led to (docs/decisions.md, "When"). Failed
    requests stay for an operator to read."""
    old = select(DecisionRequest.id).where(DecisionRequest.done_at < now - KEEP_DONE).limit(PRUNE_BATCH)
    return session.execute(delete(DecisionRequest).where(DecisionRequest.id.in_(old)),
                           execution_options={"synchronize_session": False}).rowcount or 0


def sweep_tenant(rt, tenant_id: str, now: datetime) -> int:
    """The decision sweep of one tenant: a decision request for each user its untriggered
    playbooks match, written like those ingest owes, then decided here, each in its own
    transactions; how many interventions were made. A decision that fails is recorded on
    its request (backoff: the overdue pass retries it) and fails the tenant's sweep after
    the other users are decided; the playbooks left out (no longer valid) are reported
    after the others' work is done."""
    with rt.session(tenant_id) as session:
        users = sweep_candidates(session, now)
        skipped = playbooks.skipped(playbooks.active_stored(session))
        left_out = playbooks.describe_skipped(skipped) if skipped else None
        request_ids = owe(session, tenant_id, {u: (set(), False) for u in _not_owed(session, users)},
                          now=now, enqueue=False)
    decided, first_error = 0, None
    for request_id in request_ids:
        try:
            decided += process(rt, request_id, reraise=True) is not None
        except Exception as exc:   # recorded on the request; the tenant's boundary hears of it below
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
    if left_out:
        raise SkippedStoredData(left_out)
    return decided


def _not_owed(session: Session, users: list[str]) -> list[str]:
    """The users without an open sweep request (one still waiting out a failed try's
    backoff is retried by the overdue pass, not doubled): one request per user."""
    if not users:
        return []
    owed = {r.user_id for r in session.execute(
        select(DecisionRequest.user_id, DecisionRequest.events)
        .where(DecisionRequest.user_id.in_(users), DecisionRequest.done_at.is_(None),
               DecisionRequest.failed_at.is_(None), DecisionRequest.test.is_(False),
               DecisionRequest.state_changed.is_(False))) if not r.events}
    return [u for u in users if u not in owed]


def process(rt, request_id: str, *, reraise: bool = False):
    """Decide for one owed request (the body of the job); the intervention made, if any.
    A failure is recorded on the request (backoff, or failed after MAX_ATTEMPTS), and not
    raised unless `reraise` (the sweep's tenant boundary): the job's other requests go on."""
    now = rt.now()
    with rt.session() as session:
        request = claim(session, request_id, now)
        if request is None:
            return
        tenant_id, user_id, attempts = request.tenant_id, request.user_id, request.attempts
        events, changed, test = list(request.events or []), request.state_changed, request.test
    if attempts > MAX_ATTEMPTS:     # its tries ended without a word (a process killed mid-way)
        failed(rt, request_id, attempts, f"gave up after {MAX_ATTEMPTS} tries that did not finish")
        return None
    try:
        return decide_for(rt, tenant_id, user_id, events=events, state_changed=changed, request_id=request_id,
                          test=test)
    except Exception as exc:  # the request's own boundary
        log.exception("decision for user %s of tenant %s failed (try %d of %d)", user_id, tenant_id,
                      attempts, MAX_ATTEMPTS)
        failed(rt, request_id, attempts, f"{type(exc).__name__}: {exc}")
        if reraise:
            raise
        return None


def decide_for(rt, tenant_id: str, user_id: str, *, events=(), state_changed: bool = False,
               request_id: str | None = None, test: bool = False):
    """Propose in a read-only unit of work (the writer may take seconds), then record.
    `test`: the decision follows events tracked with a test key (the sweep's are not)."""
    now = rt.now()
    with rt.session(tenant_id, commit=False) as session:
        tenant = tenants.get(session, tenant_id, now=now)
        customer = session.get(Customer, (tenant_id, user_id))
        proposal = customer and recording.propose(session, tenant, customer, now=now, writer=rt.writer,
                                        events=events, state_changed=state_changed, test_events=test)
        test_user = bool(customer and customer.test)     # read before the unit of work ends
    with rt.session(tenant_id) as session:
        made = None
        if proposal is not None:
            if proposal.acts and not _still_allowed(session, tenant_id, user_id, proposal, rt.now()):
                proposal.drop("another decision for the user was recorded first: "
                              + (proposal.decision.reason or ""))
            if proposal.acts:
                tenant = tenants.get(session, tenant_id, now=now)
                made = recording.record(session, tenant, session.get(Customer, (tenant_id, user_id)), proposal,
                                        now=rt.now(), test=test)
            else:
                recording.record_nothing(session, tenant_id, user_id, proposal, now=rt.now(),
                                         test=test or test_user)
        if request_id:
            session.execute(update(DecisionRequest).where(DecisionRequest.id == request_id,   # done once; failed stays
                                                          DecisionRequest.done_at.is_(None),
                                                          DecisionRequest.failed_at.is_(None)).values(done_at=rt.now()))
        return made


def _still_allowed(session: Session, tenant_id: str, user_id: str, proposal, now: datetime) -> bool:
    """The proposal was made without a lock, and another decision for the same user (a
    sweep and an event, two worker threads) may have been recorded since. Hold the user
    until commit and check the playbook's repeat limits and the tenant's contact policy
    against the history now."""
    hold_user(session, tenant_id, user_id)
    if proposal.spec is None:     # the agent chose no action: nothing to limit
        return True
    history = context.history(session, user_id, now, live_only=proposal.live_only, held_out=proposal.held_out,
                              policy=proposal.policy)
    made = proposal.decision
    why = repeat_limit(proposal.spec, history, now) or contact_limit(proposal.spec, made.action, made.channel,
                                                                     history, now)
    if why:
        log.info("decision for user %s dropped: %s (%s)", user_id, why, proposal.spec.name)
        proposal.decision.reason = f"{proposal.spec.name}: {why}"
    return why is None


def hold_user(session: Session, tenant_id: str, user_id: str) -> None:
    """Until this transaction ends, no other decision for the user is recorded, and the
    reads that follow see every one committed before."""
    table = Customer.__table__
    mine = (table.c.tenant_id == tenant_id, table.c.id == user_id)
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(table.c.id).where(*mine).with_for_update())
    else:   # SQLite: a first write takes the database's write lock, with a fresh snapshot
        session.execute(update(table).where(*mine).values(updated_at=table.c.updated_at))
