"""Replay one delivery: reopen it (committed), make one attempt now, outside any
transaction, and read it back: same id, same body, same event id (docs/webhooks.md,
"The delivery log and replay"). `POST /api/webhooks/deliveries/{id}/replay` and
`cs webhooks replay` are this flow."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from ..delivery import service as delivery
from ..errors import InvalidState
from ..interventions import pipeline, states
from ..interventions.models import Intervention
from ..webhooks.models import WebhookEndpoint
from ..webhooks.schemas import DeliveryPublic


@dataclass(frozen=True)
class Replayed:
    delivery: DeliveryPublic    # as it is after the attempt, with every attempt made
    attempted: bool             # False: a worker claimed the attempt first (it is being sent right now)


def replay(rt, session: Session, delivery_id: str) -> Replayed:
    """`session` is the caller's unit of work (tenant-scoped for a tenant's caller, so a
    delivery of another tenant is not found); the reopening is committed in it before
    the attempt, which takes its own short transactions."""
    _refuse_let_go_endpoint(session, delivery_id)
    delivery.reopen(session, delivery_id, rt.now())   # refuses a canceled one, with its own words
    _intervention_may_go_again(session, delivery_id, rt.now())
    session.commit()
    attempted = delivery.attempt(rt, delivery_id, paced=False) is not None
    session.expire_all()
    made = delivery.get(session, delivery_id)
    return Replayed(DeliveryPublic.of(made, delivery.attempts_of(session, [made.id])[made.id]), attempted)


def _refuse_let_go_endpoint(session: Session, delivery_id: str) -> None:
    """A delivery to an endpoint since deleted (or let go by its receiver's 410) is not
    sent again, whatever its status: the endpoint gets nothing new."""
    endpoint_id = delivery.get(session, delivery_id).endpoint_id
    endpoint = session.get(WebhookEndpoint, endpoint_id) if endpoint_id else None
    if endpoint is not None and not endpoint.active:
        raise InvalidState("this delivery's endpoint was deleted (or answered 410 Gone): it is not sent again")


def _intervention_may_go_again(session: Session, delivery_id: str, now) -> None:
    """A channel delivery goes again only while its intervention may still be sent: a
    `failed` one is approved again (its message is sent anew, and delivered or failed as
    the attempt goes); one rolled back, paused, rejected or otherwise stopped is not sent
    again (409), where the replay made an attempt that sent nothing and turned a
    delivered delivery failed."""
    made = delivery.get(session, delivery_id)
    if made.kind != pipeline.KIND:
        return
    iv = session.get(Intervention, made.subject_id)
    if iv is not None and iv.status == "failed" and states.move(session, iv, "approved", allowed=("failed",),
                                                                updated_at=now):
        return
    if iv is None or iv.status not in states.LIVE:
        raise InvalidState(f"its intervention is {iv.status if iv else 'gone'}: its message is not sent again")
