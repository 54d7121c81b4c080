"""Opt-out (docs/channels.md, Unsubscribe): every email carries a signed one-click
unsubscribe link; the link's page asks, and its POST (or a mail client's one-click POST)
opts the user out of that channel, `user.opted_out` is emitted, and the engine never
picks the channel for that user again (customer.opted_out).

An unsubscribe token is `<payload>.<signature>`, both base64url without padding: the
payload is the JSON `{"t": tenant id, "u": user id, "c": channel}`, the signature an
HMAC-SHA256 of the payload with a key derived from CS_SECRET_KEY. It does not expire:
an unsubscribe link must keep working for as long as the mail is read.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from sqlalchemy.orm import Session

from .. import logs
from ..customers.models import Customer
from ..db import locked
from ..errors import NotFound, ValidationFailed
from ..outbox import service as outbox
from ..uow import uow_of

CHANNELS = ("email", "in_app", "webhook", "crm", "all")


@dataclass(frozen=True)
class Unsubscribe:
    """What a valid token names."""

    tenant_id: str
    user_id: str
    channel: str


def _key(secret_key: str) -> bytes:
    return hashlib.sha256(b"cs-unsubscribe:" + secret_key.encode()).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(secret_key: str, payload: str) -> str:
    return _b64(hmac.new(_key(secret_key), payload.encode(), hashlib.sha256).digest())


def token(secret_key: str, tenant_id: str, user_id: str, channel: str = "email") -> str:
    payload = _b64(json.dumps({"t": tenant_id, "u": user_id, "c": channel}, separators=(",", ":")).encode())
    return f"{payload}.{_signature(secret_key, payload)}"


def link(public_url: str, secret_key: str, tenant_id: str, user_id: str, channel: str = "email") -> str:
    """The unsubscribe URL a message carries."""
    return f"{public_url}/api/unsubscribe?{urlencode({'token': token(secret_key, tenant_id, user_id, channel)})}"


def read_token(secret_key: str, raw: str | None) -> Unsubscribe:
    """The tenant, user and channel a token names; a missing, malformed or tampered token
    is a validation failure (400)."""
    payload, _, signature = (raw or "").partition(".")
    if not payload or not hmac.compare_digest(signature.encode(), _signature(secret_key, payload).encode()):
        raise _bad_token("the unsubscribe token is missing, malformed or not signed by this service")
    try:
        fields = json.loads(_unb64(payload))
        found = Unsubscribe(str(fields["t"]), str(fields["u"]), str(fields["c"]))
    except (ValueError, KeyError, TypeError):
        raise _bad_token("the unsubscribe token cannot be read") from None
    if found.channel not in CHANNELS:
        raise _bad_token(f"the unsubscribe token names an unknown channel {found.channel!r}")
    return found


def _bad_token(message: str) -> ValidationFailed:
    return ValidationFailed(message, [{"field": "token", "message": message}])


def look_up(session: Session, secret_key: str, raw_token: str | None) -> tuple[Unsubscribe, Customer]:
    """What a token names, and its user (NotFound when the user is gone); changes nothing."""
    wanted = read_token(secret_key, raw_token)
    uow_of(session).tenant_id = wanted.tenant_id   # from here on, the token's tenant only
    logs.set_tenant(wanted.tenant_id)
    customer = session.get(Customer, (wanted.tenant_id, wanted.user_id))
    if customer is None:
        raise NotFound("the user of this unsubscribe link no longer exists")
    return wanted, customer


def is_opted_out(customer: Customer, channel: str) -> bool:
    current = customer.opted_out or []
    return channel in current or "all" in current


def unsubscribe(session: Session, secret_key: str, raw_token: str | None, *, now: datetime) -> Unsubscribe:
    """Opt the token's user out of its channel. Idempotent: a second use changes nothing
    and emits nothing."""
    wanted, customer = look_up(session, secret_key, raw_token)
    opt_out(session, customer, wanted.channel, now=now)
    return wanted


def opt_out(session: Session, customer: Customer, channel: str, *, now: datetime) -> bool:
    """Add the channel to the user's opt-outs and emit user.opted_out; False when the
    user was already opted out of it (or of all). The user's row is read locked, so of
    requests racing to opt them out (an unsubscribe link posted twice at once) one
    changes it and emits, and the others find it done."""
    customer = locked(session, Customer, (customer.tenant_id, customer.id))
    if is_opted_out(customer, channel):
        return False
    customer.opted_out = list(customer.opted_out or []) + [channel]        # a new list, so the JSON column is written
    customer.updated_at = now
    outbox.record(session, customer.tenant_id, "user.opted_out",
                  {"user_id": customer.id, "opted_out_at": now.isoformat(), "channel": channel},
                  now=now, test=customer.test)
    return True
