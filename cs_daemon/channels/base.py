"""The channel interface (docs/architecture.md, "The channel interface").

A channel is how work leaves the service: `email` (SMTP), `in_app` (the user's stream),
`webhook` (a signed POST to the tenant's endpoints), `crm` (a signed POST to the tenant's
CRM) and `sink` (test mode: recorded, never sent). Every delivery row names the channel
that sends it (`deliveries.channel`); the delivery mechanism hands each claimed attempt
to that channel, and the execute pipeline asks the intervention's channel (the sink for
work of a test key) which deliveries to write and what a rollback must undo.

The composition root registers the channels (`wiring._channels`, one `register` line
each); nothing here knows the channels there are. This module imports no other part of
the service: the delivery mechanism and the pipeline both depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

SINK = "sink"       # the channel of test-mode work, whatever the intervention's channel


@dataclass(frozen=True)
class Planned:
    """One delivery a channel wants written for an approved intervention: where it goes
    (the address, as the delivery's log shows it), what it carries, the secret it is
    signed with (encrypted, "" for none, "ref:<name>" for one read at send time) and the
    webhook endpoint it is for, if any."""

    url: str
    body: dict
    secret_enc: str = ""
    endpoint_id: str | None = None
    headers: dict = field(default_factory=dict)


class Undeliverable(Exception):
    """The intervention cannot be delivered on its channel at all (no endpoint, no
    address, no CRM URL): it fails at once with this reason, and no delivery is written."""


class Channel(Protocol):
    name: str
    # True: a delivered attempt means the user has it (the intervention becomes
    # `delivered`); False: the attempt only queued it, and the channel marks it delivered
    # later (the in-app stream, when a client is sent the message)
    delivered_on_attempt: bool

    def deliveries_for(self, session, intervention) -> list[Planned]:
        """The deliveries of an approved intervention; raises Undeliverable."""

    def send(self, claimed, secret: str, rt, now):
        """One attempt of a claimed delivery (`delivery.service.Claimed`), outside any
        transaction; answers an `integrations.http.Outcome` (`permanent` for a failure
        no retry can mend)."""

    def withdraw(self, session, intervention, *, was: str, now) -> None:
        """After a rollback (in the rollback's transaction): undo or announce what was
        delivered. `was` is the status the intervention was rolled back from."""


_registry: dict[str, Channel] = {}


def register(channel: Channel) -> None:
    """Make a channel known by its name (the composition root; a test may add its own)."""
    _registry[channel.name] = channel


def unregister(name: str) -> None:
    _registry.pop(name, None)


def get(name: str) -> Channel:
    try:
        return _registry[name]
    except KeyError:
        raise LookupError(f"no channel named {name!r} is registered") from None


def names() -> set[str]:
    return set(_registry)
