"""Stream tokens: the credential of `GET /api/in-app/stream` (docs/channels.md, "Tokens").

A tenant's backend mints one for a user with its API key and hands it to its front end,
which never holds a key. The token is `<payload>.<signature>`, both base64url without
padding: the payload is the JSON array [tenant id, user id, expiry in unix seconds], the
signature HMAC-SHA256 over the payload with a key derived from CS_SECRET_KEY. Nothing is
stored: a token is valid until it expires (24 h).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from ..errors import Unauthorized

LIFETIME = timedelta(hours=24)
ALPHABET = re.compile(r"[A-Za-z0-9_.-]*")      # base64url and the dot: every character a token has
_PURPOSE = b"cs-in-app-stream-token:"


@dataclass(frozen=True)
class StreamGrant:
    """Who a valid token lets listen: one user of one tenant, until `expires_at`."""

    tenant_id: str
    user_id: str
    expires_at: datetime
    token_id: str = ""      # names the token (its digest) for the per-token stream cap


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(secret_key: str, payload: str) -> str:
    key = hashlib.sha256(_PURPOSE + secret_key.encode()).digest()
    return _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())


def mint(secret_key: str, tenant_id: str, user_id: str, now: datetime) -> tuple[str, datetime]:
    expires_at = (now + LIFETIME).replace(microsecond=0)
    payload = _b64(json.dumps([tenant_id, user_id, int(expires_at.timestamp())],
                              separators=(",", ":"), ensure_ascii=False).encode())
    return f"{payload}.{_signature(secret_key, payload)}", expires_at


def verify(secret_key: str, token: str | None, now: datetime) -> StreamGrant:
    """The grant of a token; Unauthorized when it is missing, forged or expired."""
    if not token or token.count(".") != 1 or not ALPHABET.fullmatch(token):
        raise Unauthorized("missing or malformed stream token")
    payload, signature = token.split(".")
    if not hmac.compare_digest(signature, _signature(secret_key, payload)):
        raise Unauthorized("invalid stream token")
    try:
        tenant_id, user_id, expiry = json.loads(_unb64(payload))
        expires_at = datetime.fromtimestamp(int(expiry), timezone.utc)
    except (ValueError, TypeError, binascii.Error):
        raise Unauthorized("invalid stream token") from None
    if now >= expires_at:
        raise Unauthorized("this stream token has expired; mint a new one")
    return StreamGrant(str(tenant_id), str(user_id), expires_at, hashlib.sha256(token.encode()).hexdigest()[:32])
