"""The invitation email (docs/channels.md, "Team invitations"): when SMTP_URL is set, an invite also writes a
`mailto:` delivery in the invite's own transaction (a row before a message), which the
email channel sends off the request path, on the delivery schedule, with its attempts
logged like every delivery.

The mail carries the accept link `$CS_PUBLIC_URL/api/team/accept?token=…`. The invitation
keeps only the token's digest, so the token rides as the delivery's secret: encrypted at
rest with CS_SECRET_KEY and decrypted at send time. An invitation accepted, revoked or
expired before its mail leaves is not mailed (a permanent failure of the attempt)."""

from __future__ import annotations

import html
from datetime import datetime
from email.message import EmailMessage
from urllib.parse import urlencode

from sqlalchemy.orm import Session

from .. import crypto
from ..channels import email
from ..channels import sink
from ..delivery import service as delivery
from ..delivery.models import Delivery
from ..tenants.models import Tenant
from .models import Invitation, Member

KIND = "invitation"
EVENT_TYPE = "team.invitation"


def accept_link(public_url: str, token: str) -> str:
    return f"{public_url}/api/team/accept?{urlencode({'token': token})}"


def queue(session: Session, invitation: Invitation, token: str, *, settings, now: datetime,
          test: bool = False) -> Delivery | None:
    """Write the invitation's mail delivery in the caller's transaction; nothing without
    SMTP_URL. Work of an rt_test_ key goes to the test-mode sink, as on every channel."""
    if not settings.smtp_url:
        return None
    tenant = session.get(Tenant, invitation.tenant_id)
    body = {"invitation_id": invitation.id, "team": tenant.name, "role": invitation.role,
            "invited_by": _inviter(session, invitation.invited_by), "expires_at": invitation.expires_at.isoformat()}
    return delivery.create(session, invitation.tenant_id, kind=KIND, channel=sink.NAME if test else email.NAME,
                           url=sink.SINK_URL if test else f"mailto:{invitation.email}", body=body,
                           secret_enc=crypto.encrypt(settings.secret_key, token), event_type=EVENT_TYPE,
                           subject_id=invitation.id, headers={"X-Service-Channel": "email"}, test=test, now=now)


def _inviter(session: Session, invited_by: str | None) -> str | None:
    member = session.get(Member, invited_by) if invited_by else None
    return member.email if member is not None else None


def compose(rt, claimed, body: dict, to: str, token: str) -> EmailMessage:
    """The mail of one attempt (the email channel's composer for this kind)."""
    _check_still_open(rt, claimed)
    settings = rt.settings
    link = accept_link(settings.cs_public_url, token)
    who = body.get("invited_by") or "An administrator"
    expires = datetime.fromisoformat(body["expires_at"]).strftime("%Y-%m-%d %H:%M UTC")
    msg = email.addressed(settings.mail_from, to, f"You are invited to join {body['team']}")
    msg["X-Service-Invitation-Id"] = body["invitation_id"]
    msg.set_content(_text(who, body["team"], body["role"], link, expires))
    msg.add_alternative(_html(who, body["team"], body["role"], link, expires), subtype="html")
    return msg


def _check_still_open(rt, claimed) -> None:
    with rt.session(claimed.tenant_id) as session:
        invitation = session.get(Invitation, claimed.subject_id)
        if invitation is None or invitation.status != "pending":
            raise email.Unsendable(f"the invitation is {invitation.status if invitation else 'gone'}: not mailed")
        if invitation.expires_at <= rt.now():
            raise email.Unsendable("the invitation has expired: not mailed")


def _text(who: str, team: str, role: str, link: str, expires: str) -> str:
    return (f"{who} invited you to join {team} as {_article(role)} {role}.\n\n"
            f"Accept the invitation: {link}\n\n"
            f"The link works until {expires}, once. Accepting makes you a member and shows your personal\n"
            "API key, once: keep it somewhere safe.\n\n"
            "If you did not expect this invitation, ignore this email.\n")


def _html(who: str, team: str, role: str, link: str, expires: str) -> str:
    e = html.escape
    return ("<!doctype html>\n<html><body>\n"
            f"<p>{e(who)} invited you to join <b>{e(team)}</b> as {_article(role)} {e(role)}.</p>\n"
            f'<p><a href="{e(link, quote=True)}">Accept the invitation</a></p>\n'
            f"<p>The link works until {e(expires)}, once. Accepting makes you a member and shows your "
            "personal API key, once: keep it somewhere safe.</p>\n"
            '<p style="font-size:12px;color:#666">If you did not expect this invitation, ignore this email.</p>\n'
            "</body></html>\n")


def _article(role: str) -> str:
    return "an" if role[:1] in "aeiou" else "a"
