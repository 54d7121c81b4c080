"""Test mode: deliveries of work made with an rt_test_ key (interventions, external
actions, invitations) go to a recording sink instead of a real channel, and still move
through every status. The execute pipeline picks this channel for every test-mode
intervention, whatever its own channel."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from ..integrations.http import Outcome
from ..interventions.models import Intervention
from .base import SINK, Planned
from .payload import channel_payload, customer_of

NAME = SINK
SINK_URL = "sink:test-mode"


def transport(claimed, secret, rt, now) -> Outcome:
    return Outcome(200, f"recorded by the test-mode sink instead of {claimed.headers.get('X-Service-Channel', 'the channel')}",
                   None, 0.0)


class Sink:
    name = NAME
    delivered_on_attempt = True

    def deliveries_for(self, session: Session, iv: Intervention) -> list[Planned]:
        return [Planned(url=SINK_URL, body=channel_payload(iv, customer_of(session, iv)))]

    def send(self, claimed, secret: str, rt, now: datetime) -> Outcome:
        return transport(claimed, secret, rt, now)

    def withdraw(self, session: Session, iv: Intervention, *, was: str, now: datetime) -> None:
        """Nothing left the service (a rollback is the intervention's own channel's to
        announce, in test mode as its channel does it)."""


CHANNEL = Sink()
