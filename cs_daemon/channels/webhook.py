"""The webhook channel (docs/webhooks.md): a signed POST over HTTP(S).

An approved `webhook` intervention is one delivery of the channel-delivery payload to
each active endpoint of the tenant (a tenant without one fails it at once). The same signed POST carries
everything else that leaves the service over HTTP: the endpoints' events and tests, and
the dispatches of external actions. A URL of a registered reference scheme
(`URL_REFS`, e.g. a platform action type's URL made of credentials kept encrypted) is
resolved only when the attempt is sent, and the attempt's log shows none of the secrets
it was made of. A rollback of work that was sent is announced to the endpoints with an
`intervention.rolled_back` event.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Callable

from sqlalchemy.orm import Session

from ..delivery import service as delivery
from ..delivery.signing import headers as signed_headers
from ..integrations import http
from ..interventions.models import Intervention
from ..outbox import service as outbox
from ..webhooks.models import WebhookEndpoint
from .base import Planned, Undeliverable
from .payload import channel_payload, customer_of

NAME = "webhook"

# "<scheme>:<reference>" URLs are resolved at send time, e.g. a platform action type's URL
# filled from credentials kept encrypted (external/credentials.py): the row, its log and
# every listing hold the reference. A resolver takes (session, reference, CS_SECRET_KEY)
# and answers (URL, the secret values in it), which are kept out of the attempt's log.
# The composition root registers them.
UrlRef = Callable[[Session, str, str], tuple[str, tuple[str, ...]]]
URL_REFS: dict[str, UrlRef] = {}
HIDDEN = "[credential]"


def post(rt, claimed: delivery.Claimed, secret: str, now: datetime) -> http.Outcome:
    """One signed POST of a claimed delivery to its URL (or to the URL its reference
    resolves to now)."""
    scheme = claimed.url.split(":", 1)[0]
    if scheme in URL_REFS:
        return _post_resolved(rt, claimed, secret, now)
    return _post(rt, claimed.url, claimed, secret, now)


def _post(rt, url: str, claimed: delivery.Claimed, secret: str, now: datetime) -> http.Outcome:
    body = claimed.body.encode()
    hdrs = signed_headers(secret=secret, body=body, delivery_id=claimed.id,
                          event_id=claimed.subject_id, now=now, extra=claimed.headers)
    return http.post(url, body, hdrs, allow_private=rt.settings.private_webhook_urls_allowed,
                     deadline_s=delivery.DEADLINE_SECONDS, tenant=claimed.tenant_id)


def _post_resolved(rt, claimed: delivery.Claimed, secret: str, now: datetime) -> http.Outcome:
    """POST to the URL a reference resolves to now; what the attempt logs (its error, the
    answer's excerpt) shows none of the secrets the URL was made of."""
    scheme, ref = claimed.url.split(":", 1)
    try:
        with rt.session(claimed.tenant_id, commit=False) as session:
            url, hidden = URL_REFS[scheme](session, ref, rt.settings.secret_key)
    except Exception as exc:  # a URL that cannot be made fails the attempt, visibly
        return http.Outcome(None, None, f"URL unavailable: {type(exc).__name__}: {exc}", 0.0)
    outcome = _post(rt, url, claimed, secret, now)
    secrets = (url, *hidden)
    return replace(outcome, error=_hide(outcome.error, secrets), excerpt=_hide(outcome.excerpt, secrets))


def _hide(text: str | None, secrets: tuple[str, ...]) -> str | None:
    for value in sorted(secrets, key=len, reverse=True):
        if text and value:
            text = text.replace(value, HIDDEN)
    return text


class Webhook:
    name = NAME
    delivered_on_attempt = True

    def deliveries_for(self, session: Session, iv: Intervention) -> list[Planned]:
        endpoints = session.query(WebhookEndpoint).filter(WebhookEndpoint.active.is_(True)).all()
        if not endpoints:
            raise Undeliverable("no active webhook endpoint")
        body = channel_payload(iv, customer_of(session, iv))
        return [Planned(url=e.url, body=body, secret_enc=e.secret_enc, endpoint_id=e.id) for e in endpoints]

    def send(self, claimed: delivery.Claimed, secret: str, rt, now: datetime) -> http.Outcome:
        return post(rt, claimed, secret, now)

    def withdraw(self, session: Session, iv: Intervention, *, was: str, now: datetime) -> None:
        if was in ("sent", "delivered"):
            outbox.record(session, iv.tenant_id, "intervention.rolled_back", rolled_back(iv, now),
                          now=now, test=iv.test)


def rolled_back(iv: Intervention, now: datetime) -> dict:
    return {"intervention_id": iv.id, "user_id": iv.user_id, "playbook_id": iv.playbook_id, "channel": iv.channel,
            "reason": iv.reason, "rolled_back_at": now.isoformat()}


CHANNEL = Webhook()
