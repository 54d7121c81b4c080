"""The execute pipeline: approved → sent → delivered | failed, on the one durable
delivery mechanism. Approval writes the channel's deliveries in the same transaction;
the delivery listener moves the intervention's status as attempts are recorded. Paused
or rolled-back work is cancelled before it leaves; the kill switch holds every delivery
until it is turned off (the delivery mechanism's claim checks it).

The channel is the intervention's (`email`, `in_app`, `webhook`, `crm`), or the test-mode
sink for work of a test key, found in the channel registry (channels/base.py): it says
which deliveries to write, whether a delivered attempt delivers the intervention, and
what a rollback must undo. The pipeline knows no channel by name.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_
from sqlalchemy.orm import Session

from ..channels import base as channels
from ..db import locked
from ..delivery import service as delivery
from ..delivery import states as delivery_states
from ..delivery.models import Delivery
from ..integrations.http import Outcome
from ..outbox import service as outbox
from . import outcomes, states
from .models import Intervention

KIND = "channel"


def channel_of(iv: Intervention) -> channels.Channel:
    """The channel an intervention's deliveries go by: the sink in test mode."""
    return channels.get(channels.SINK if iv.test else iv.channel)


def start(session: Session, iv: Intervention, *, now: datetime) -> list[Delivery]:
    """Write the deliveries of an approved intervention (sent after commit). One its
    channel cannot deliver at all fails at once, visibly, with the reason (and no
    delivery)."""
    channel = channel_of(iv)
    try:
        planned = channel.deliveries_for(session, iv)
    except channels.Undeliverable as exc:
        _failed(session, iv, str(exc), now)
        return []
    return [delivery.create(session, iv.tenant_id, kind=KIND, channel=channel.name, url=p.url, body=p.body,
                            secret_enc=p.secret_enc, endpoint_id=p.endpoint_id, event_type=f"channel.{iv.channel}",
                            subject_id=iv.id, test=iv.test, now=now,
                            headers={delivery.CHANNEL_HEADER: iv.channel, **p.headers})
            for p in planned]


def stop(session: Session, iv: Intervention, *, now: datetime) -> None:
    """A paused or rolled-back intervention: its open deliveries are cancelled (an attempt
    in flight finds its delivery cancelled and records nothing more), and its in-app
    message, if queued already, is not sent while it stays so (channels/in_app.py)."""
    delivery.cancel(session, subject_id=iv.id, kind=KIND, now=now)


def withdraw(session: Session, iv: Intervention, *, was: str, now: datetime) -> None:
    """After a rollback, the intervention's own channel undoes or announces what it
    delivered (in test mode too, as that channel does it): in-app messages are withdrawn
    from the stream (a queued one is never sent, a sent one is announced as withdrawn);
    webhook and CRM receivers of work that was sent are told with an
    intervention.rolled_back event (the CRM never hears of test-mode work). Work still
    `approved` whose delivery was attempted, or is being attempted, counts as sent: the
    receiver may hold it though no answer came back before the rollback."""
    if was == "approved" and _attempted(session, iv, now):
        was = "sent"
    channels.get(iv.channel).withdraw(session, iv, was=was, now=now)


def _attempted(session: Session, iv: Intervention, now: datetime) -> bool:
    return session.query(Delivery.id).filter(
        Delivery.subject_id == iv.id, Delivery.kind == KIND,
        or_(Delivery.attempts > 0, Delivery.locked_until > now)).first() is not None


def _delivered(session: Session, iv: Intervention, now: datetime) -> None:
    if states.move(session, iv, "delivered", allowed=states.IN_FLIGHT, delivered_at=now, updated_at=now) is None:
        return
    iv.sent_at = iv.sent_at or now
    outcomes.open_window(session, iv, now)
    outbox.record(session, iv.tenant_id, "intervention.delivered", {
        "intervention_id": iv.id, "user_id": iv.user_id, "playbook_id": iv.playbook_id, "channel": iv.channel,
        "delivered_at": now.isoformat()}, now=now, test=iv.test)


def _failed(session: Session, iv: Intervention, why: str, now: datetime) -> None:
    if states.move(session, iv, "failed", allowed=states.IN_FLIGHT, updated_at=now) is None:
        return
    outbox.record(session, iv.tenant_id, "intervention.failed", {
        "intervention_id": iv.id, "user_id": iv.user_id, "channel": iv.channel,
        "error": {"code": "delivery_failed", "message": why}, "failed_at": now.isoformat()}, now=now, test=iv.test)


def _sent(session: Session, iv: Intervention, now: datetime) -> None:
    if states.move(session, iv, "sent", allowed=states.IN_FLIGHT, updated_at=now) is not None:
        iv.sent_at = iv.sent_at or now


def mark_delivered(session: Session, intervention_id: str, now: datetime) -> None:
    """For channels that deliver later than the attempt (the in-app stream on connect)."""
    iv = session.get(Intervention, intervention_id)
    if iv is not None:
        _delivered(session, iv, now)


def lock_subject(session: Session, intervention_id: str) -> None:
    """The intervention first, then its delivery: the order a pause or rollback takes them."""
    locked(session, Intervention, intervention_id)


def on_attempt(session: Session, made: Delivery, outcome: Outcome, final: bool) -> None:
    """Move the intervention as its delivery moved; one paused, rolled back or settled
    meanwhile stays as it is (`states.move` finds it out of flight)."""
    iv = session.get(Intervention, made.subject_id)
    if iv is None:
        return
    now = made.updated_at
    if made.status == delivery_states.DELIVERED:
        if channels.get(made.channel).delivered_on_attempt:
            _delivered(session, iv, now)
        else:
            _sent(session, iv, now)   # queued (the in-app stream): delivered later
    elif made.status == delivery_states.FAILED:
        others = session.query(Delivery).filter(Delivery.subject_id == iv.id, Delivery.kind == KIND,
                                                Delivery.id != made.id,
                                                Delivery.status.in_((*delivery_states.OPEN, delivery_states.DELIVERED))).count()
        if not others:
            _failed(session, iv, outcome.error or "delivery failed", now)
    else:
        _sent(session, iv, now)


def still_wanted(session: Session, intervention_id: str) -> str | None:
    """Checked right before each attempt leaves: work paused or rolled back since it was
    claimed is not sent."""
    iv = session.get(Intervention, intervention_id)
    if iv is None or iv.status not in states.LIVE:
        return f"not sent: the intervention is {iv.status if iv else 'gone'}, no longer approved"
    return None
