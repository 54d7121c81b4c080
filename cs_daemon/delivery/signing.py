"""Headers of a signed delivery (docs/webhooks.md, "What a delivery looks like")."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import datetime

USER_AGENT = "Service-Webhook/1.0"


def signature(secret: str, body: bytes) -> str:
    """X-Service-Signature: HMAC-SHA256 hex of the exact raw body."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def standard_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, keyed with the
    secret's bytes (the 64 hex characters as sent)."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret.encode(), signed, hashlib.sha256).digest()).decode()


def headers(*, secret: str, body: bytes, delivery_id: str, event_id: str | None, now: datetime,
            extra: dict[str, str] | None = None) -> dict[str, str]:
    ts = int(now.timestamp())
    out = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Service-Signature": signature(secret, body),
        "X-Service-Timestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "webhook-id": delivery_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": standard_signature(secret, delivery_id, ts, body),
    }
    out["X-Service-Event-Id"] = event_id or delivery_id   # every delivery carries one
    out.update(extra or {})
    return out
