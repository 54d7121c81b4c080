"""The sign-in mail: a `mailto:` delivery written with the link (a row before a message),
sent by the email channel off the request path, with its attempts logged like every
delivery. The link's token rides as the delivery's secret, encrypted at rest with
CS_SECRET_KEY; a link used or expired before its mail leaves is not mailed."""

from __future__ import annotations

import html
from datetime import datetime
from email.message import EmailMessage
from urllib.parse import urlencode

from sqlalchemy.orm import Session

from .. import crypto
from ..channels import email
from ..delivery import service as delivery
from ..tenants.models import Tenant
from . import service

KIND = "console_sign_in"
EVENT_TYPE = "console.sign_in"


def sign_in_link(public_url: str, token: str) -> str:
    return f"{public_url}/console/auth?{urlencode({'token': token})}"


def queue(session: Session, made: service.LinkMade, *, settings, now: datetime) -> None:
    tenant = session.get(Tenant, made.link.tenant_id)
    delivery.create(session, made.link.tenant_id, kind=KIND, channel=email.NAME, url=f"mailto:{made.email}",
                    body={"team": tenant.name, "expires_at": made.link.expires_at.isoformat()},
                    secret_enc=crypto.encrypt(settings.secret_key, made.token), event_type=EVENT_TYPE,
                    subject_id=made.link.id, headers={"X-Service-Channel": "email"}, now=now)


def compose(rt, claimed, body: dict, to: str, token: str) -> EmailMessage:
    with rt.session(claimed.tenant_id) as session:
        if not service.link_open(session, claimed.subject_id, now=rt.now()):
            raise email.Unsendable("the sign-in link is used or expired: not mailed")
    settings = rt.settings
    link = sign_in_link(settings.cs_public_url, token)
    until = datetime.fromisoformat(body["expires_at"]).strftime("%H:%M UTC")
    msg = email.addressed(settings.mail_from, to, f"Sign in to the {body['team']} console")
    msg.set_content(f"Sign in to the {body['team']} console: {link}\n\n"
                    f"The link works once, until {until}. If you did not ask for it, ignore this email.\n")
    e = html.escape
    msg.add_alternative("<!doctype html>\n<html><body>\n"
                        f'<p><a href="{e(link, quote=True)}">Sign in to the {e(body["team"])} console</a></p>\n'
                        f"<p>The link works once, until {e(until)}. If you did not ask for it, ignore this email.</p>\n"
                        "</body></html>\n", subtype="html")
    return msg
