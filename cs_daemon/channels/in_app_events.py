"""What a user did with an in-app message, as the SDK reports it (docs/channels.md, "Clicks and dismissals"):
`clicked` is the user's response (user.responded); `dismissed` is "not these again", so
the user is opted out of in-app messages for good (user.opted_out, channel in_app).

The stream token is the credential: it names the one user whose messages may be
reported, so a page can report nothing about anyone else."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from .. import logs
from ..customers.models import Customer
from ..errors import InvalidState, NotFound
from ..interventions import outcomes, pipeline
from ..interventions.models import Intervention
from ..uow import uow_of
from . import optout
from .in_app_tokens import StreamGrant

ACTIONS = ("clicked", "dismissed")
SHOWN = ("sent", "delivered")


def report(session: Session, grant: StreamGrant, intervention_id: str, action: str, *, now: datetime) -> bool:
    """Record the action; False when it changed nothing (a second click or dismissal)."""
    uow_of(session).tenant_id = grant.tenant_id     # from here on, the token's tenant only
    logs.set_tenant(grant.tenant_id)
    iv = session.scalars(select(Intervention).where(
        Intervention.id == intervention_id, Intervention.user_id == grant.user_id,
        Intervention.channel == "in_app")).first()
    if iv is None:
        raise NotFound("no in-app message of this user has that id")
    if iv.status not in SHOWN:
        raise InvalidState(f"the message is {iv.status}: only a message on the stream can be {action}")
    if action == "clicked":
        pipeline.mark_delivered(session, iv.id, now)   # a click proves it was shown
        return outcomes.respond(session, iv, at=now, response="clicked", event=None, now=now)
    customer = session.get(Customer, (grant.tenant_id, grant.user_id))
    if customer is None:
        raise NotFound("the user of this stream token no longer exists")
    return optout.opt_out(session, customer, "in_app", now=now)
