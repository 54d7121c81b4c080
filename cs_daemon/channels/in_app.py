"""The in_app channel (docs/channels.md, "In-app"): approved in-app interventions become messages on
the user's server-sent-events stream.

The channel (`CHANNEL`) writes one `inapp:<user_id>` delivery for an approved
intervention; its attempt writes the message row (once per intervention) and wakes the
user's streams. The attempt only queues the message (`delivered_on_attempt` is False), so
the pipeline marks the intervention `sent`. A stream that writes the message marks it, and the
intervention, `delivered`; a user who is not connected gets it on the next connect. A
rollback withdraws the message: it is never sent again, and streams that sent it say
`event: withdrawn`.

The stream itself is `in_app_stream`; tokens are `in_app_tokens`; wake-ups across
processes are `in_app_wakeups`.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime, timedelta

import redis
from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from .. import domain_events
from ..config import Settings
from ..customers.models import Customer
from ..db import locked
from ..delivery import service as delivery
from ..integrations.http import Outcome
from ..interventions import pipeline
from ..interventions.models import Intervention
from ..playbooks.models import Playbook
from . import in_app_wakeups
from .base import Planned
from .in_app_models import InAppMessage
from .payload import channel_payload, customer_of

log = logging.getLogger(__name__)

NAME = "in_app"
SCHEME = "inapp"    # the address of a delivery: inapp:<user_id>
QUEUEABLE = ("approved", "sent", "delivered")     # delivered: a repeated attempt finds it queued
WITHDRAWAL_RECALL = timedelta(days=7)   # how far back a resumed stream hears of withdrawals


def message_body(iv: Intervention, playbook_name: str, now: datetime) -> dict:
    """The message as the client sees it (the spec's fields)."""
    return {"interventionId": iv.id, "type": "in_app", "body": iv.message_body or "",
            "playbookName": playbook_name, "timestamp": now.isoformat()}


# --- queueing (the delivery job) ------------------------------------------------------


def queue(session: Session, iv: Intervention, now: datetime) -> InAppMessage:
    """The message of an approved intervention, written once."""
    queued = session.scalars(select(InAppMessage).where(InAppMessage.intervention_id == iv.id)).first()
    if queued is not None:
        return queued
    playbook = session.get(Playbook, iv.playbook_id) if iv.playbook_id else None
    made = InAppMessage(user_id=iv.user_id, intervention_id=iv.id, created_at=now,
                        body=message_body(iv, playbook.name if playbook else "", now))
    session.add(made)
    session.flush()     # the unique (tenant, intervention) index backs the lock up
    return made


def why_not(session: Session, iv: Intervention | None) -> str | None:
    """Why an intervention's message must not be queued (None: it may)."""
    if iv is None or iv.status not in QUEUEABLE:
        return f"not queued: the intervention is {iv.status if iv else 'gone'}, no longer approved"
    if opted_out(session, iv.tenant_id, iv.user_id):
        return "the user opted out of in_app"
    return None


def opted_out(session: Session, tenant_id: str, user_id: str) -> bool:
    customer = session.get(Customer, (tenant_id, user_id))
    return customer is not None and bool({"in_app", "all"} & set(customer.opted_out or []))


def wake(settings: Settings, tenant_id: str, user_id: str) -> None:
    """Tell the user's streams, wherever they are held, to read what is new. A lost
    wake-up only delays the message to the next one or the next connect."""
    try:
        in_app_wakeups.for_settings(settings).publish(tenant_id, user_id)
    except redis.RedisError as exc:
        log.warning("in-app wake-up for a user of tenant %s not published: %s", tenant_id, exc)


def transport(claimed: delivery.Claimed, secret: str, rt, now: datetime) -> Outcome:
    """The `inapp:` delivery: queue the message and wake the user's streams. The
    intervention row is locked meanwhile, so a rollback either comes first (nothing is
    queued) or waits and then withdraws what was queued. Work that can no longer go
    (rolled back or paused since approval, or the user opted out) fails for good."""
    started = time.monotonic()
    intervention_id = json.loads(claimed.body)["intervention_id"]
    with rt.session(claimed.tenant_id) as session:
        iv = locked(session, Intervention, intervention_id)
        refused = why_not(session, iv)
        queued = None if refused else queue(session, iv, now)
        user_id, seq = (queued.user_id, queued.seq) if queued else (None, None)
    latency_ms = (time.monotonic() - started) * 1000
    if refused:
        return Outcome(None, None, refused, latency_ms, permanent=True)
    wake(rt.settings, claimed.tenant_id, user_id)
    return Outcome(200, f"queued on the user's in-app stream as message {seq}", None, latency_ms)


class InApp:
    name = NAME
    delivered_on_attempt = False    # queued by the attempt, delivered when a stream sends it

    def deliveries_for(self, session: Session, iv: Intervention) -> list[Planned]:
        return [Planned(url=f"{SCHEME}:{iv.user_id}", body=channel_payload(iv, customer_of(session, iv)))]

    def send(self, claimed: delivery.Claimed, secret: str, rt, now: datetime) -> Outcome:
        return transport(claimed, secret, rt, now)

    def withdraw(self, session: Session, iv: Intervention, *, was: str, now: datetime) -> None:
        withdraw(session, iv, now)      # queued or sent, it is withdrawn


CHANNEL = InApp()


# --- withdrawal (rollback) ------------------------------------------------------------


def withdraw(session: Session, iv: Intervention, now: datetime) -> None:
    """A rolled-back in-app intervention: its message is never sent again, and streams
    that sent it are told (after commit: `InAppInterventionWithdrawn`, `wake_streams`).
    The intervention is locked already, so a delivery job either queued the message
    before (it is withdrawn here) or finds the intervention rolled back and queues
    nothing."""
    session.flush()
    session.execute(update(InAppMessage)
                    .where(InAppMessage.intervention_id == iv.id, InAppMessage.withdrawn_at.is_(None))
                    .values(withdrawn_at=now))
    domain_events.publish(session, domain_events.InAppInterventionWithdrawn(iv.tenant_id, iv.user_id))


def wake_streams(withdrawn: list[domain_events.InAppInterventionWithdrawn], settings: Settings | None) -> None:
    """After commit (the handler of InAppInterventionWithdrawn, registered by
    cs_daemon/wiring.py): wake the streams of each user whose message was withdrawn."""
    for event in withdrawn:
        wake(settings, event.tenant_id, event.user_id)


# --- reading for a stream -------------------------------------------------------------


def high_water(session: Session, user_id: str) -> int:
    """The newest message id of the user (0 when none)."""
    return session.scalar(select(func.max(InAppMessage.seq)).where(InAppMessage.user_id == user_id)) or 0


def unsent(session: Session, user_id: str, *, after: int, limit: int) -> list[InAppMessage]:
    """Live messages a stream whose client has messages up to `after` may have to send:
    newer ones, and any never delivered (a message can commit after a newer one). Live:
    not withdrawn, and of an intervention still approved, sent or delivered (one paused
    or rolled back after its message was queued is not sent, whatever the order in which
    the two committed)."""
    return list(session.scalars(
        select(InAppMessage)
        .join(Intervention, (Intervention.id == InAppMessage.intervention_id)
              & (Intervention.tenant_id == InAppMessage.tenant_id))
        .where(InAppMessage.user_id == user_id, InAppMessage.withdrawn_at.is_(None),
               Intervention.status.in_(QUEUEABLE),
               or_(InAppMessage.seq > after, InAppMessage.delivered_at.is_(None)))
        .order_by(InAppMessage.seq).limit(limit)))


def withdrawn(session: Session, user_id: str, *, upto: int, now: datetime) -> list[tuple[int, str]]:
    """(seq, intervention id) of the user's messages up to `upto` withdrawn lately."""
    return [tuple(row) for row in session.execute(
        select(InAppMessage.seq, InAppMessage.intervention_id)
        .where(InAppMessage.user_id == user_id, InAppMessage.withdrawn_at.is_not(None),
               InAppMessage.seq <= upto, InAppMessage.withdrawn_at >= now - WITHDRAWAL_RECALL)
        .order_by(InAppMessage.seq))]


def mark_delivered(session: Session, written: dict[int, str], now: datetime) -> None:
    """Messages written to a live stream (seq -> intervention id): delivered, and so
    their interventions (the first time only). The interventions are locked first, in
    one order, as the delivery job and a rollback lock them before the message rows."""
    for intervention_id in sorted(set(written.values())):
        locked(session, Intervention, intervention_id)
    first = session.scalars(update(InAppMessage)
                            .where(InAppMessage.seq.in_(list(written)), InAppMessage.delivered_at.is_(None))
                            .values(delivered_at=now)
                            .returning(InAppMessage.intervention_id)).all()
    for intervention_id in first:
        pipeline.mark_delivered(session, intervention_id, now)
