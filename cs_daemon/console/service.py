"""Signing in to the console (docs/console.md, "Signing in").

A team member asks for a link by email: each live member with that address (one per
team) gets a one-time link, valid LINK_TTL, mailed through the delivery mechanism like
an invitation. Opening it makes a session of that member. Or someone pastes an API key
once: the session is the key's. A session is a random token in a cookie; only its
digest is stored. Every request re-reads the member or key behind its session, so a
removed member, a revoked key or a changed role counts at once, exactly as for the API
key itself, and a test key's session is bound by the test-mode rules.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session

from ..auth import service as auth
from ..auth.models import ApiKey
from ..auth.service import Caller
from ..db import locked
from ..errors import Forbidden, Gone, ValidationFailed
from ..team.models import Member
from ..tenants.models import Tenant
from .models import ConsoleSession, SignInLink

LINK_TTL = timedelta(minutes=15)
OPEN_LINKS_PER_MEMBER = 3          # unused, unexpired links a member may have at once
SESSION_IDLE = timedelta(hours=12)  # a session unused this long is over
SESSION_MAX = timedelta(days=7)     # and every session ends this long after sign-in
SEEN_RESOLUTION = timedelta(minutes=1)
KEEP_ENDED = timedelta(days=1)      # ended sessions and spent links are deleted this long after
DATA_VIEWS = ("live", "test", "both")
READERS = frozenset({"read", "full"})


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# --- links ---------------------------------------------------------------------------

@dataclass(frozen=True)
class LinkMade:
    link: SignInLink
    token: str
    email: str


def request_links(session: Session, email: str, *, now: datetime) -> list[LinkMade]:
    """A link for each team this address is a live member of (an unscoped session). A
    member who already holds OPEN_LINKS_PER_MEMBER unused links gets no more until one
    expires: the form cannot be used to flood a mailbox. Nobody learns from the answer
    whether the address belongs to anyone."""
    made = []
    for member in session.scalars(select(Member).where(func.lower(Member.email) == email.strip().lower(),
                                                       Member.removed_at.is_(None))):
        session.execute(delete(SignInLink).where(SignInLink.tenant_id == member.tenant_id,
                                                 SignInLink.member_id == member.id,
                                                 SignInLink.expires_at < now - KEEP_ENDED))
        if _open_links(session, member, now) >= OPEN_LINKS_PER_MEMBER:
            continue
        token = secrets.token_urlsafe(32)
        link = SignInLink(tenant_id=member.tenant_id, member_id=member.id, token_digest=digest(token),
                          created_at=now, expires_at=now + LINK_TTL)
        session.add(link)
        made.append(LinkMade(link, token, member.email))
    session.flush()
    return made


def _open_links(session: Session, member: Member, now: datetime) -> int:
    return session.scalar(select(func.count()).select_from(SignInLink).where(
        SignInLink.tenant_id == member.tenant_id, SignInLink.member_id == member.id,
        SignInLink.used_at.is_(None), SignInLink.expires_at > now)) or 0


def use_link(session: Session, token: str, *, now: datetime) -> Member:
    """The member a link signs in, the link spent (read locked: of two uses, one wins).
    Gone for an unknown, used or expired link, or one whose member left the team."""
    found = session.scalars(select(SignInLink.id).where(SignInLink.token_digest == digest(token))).first()
    link = locked(session, SignInLink, found) if found else None
    if link is None or link.used_at is not None or link.expires_at <= now:
        raise Gone("this sign-in link is used, expired or unknown; ask for a new one")
    link.used_at = now
    member = session.get(Member, link.member_id)
    if member is None or member.removed_at is not None:
        raise Gone("this sign-in link is used, expired or unknown; ask for a new one")
    return member


def link_open(session: Session, link_id: str, *, now: datetime) -> bool:
    """Whether a link may still be mailed (unused, unexpired)."""
    link = session.get(SignInLink, link_id)
    return link is not None and link.used_at is None and link.expires_at > now


# --- sessions ------------------------------------------------------------------------

@dataclass(frozen=True)
class Started:
    row: ConsoleSession
    token: str


def start(session: Session, tenant_id: str, *, now: datetime, member_id: str | None = None,
          key_id: str | None = None) -> Started:
    session.execute(delete(ConsoleSession).where(     # the tenant's sessions over for a day
        ConsoleSession.tenant_id == tenant_id,
        or_(ConsoleSession.expires_at < now - KEEP_ENDED, ConsoleSession.ended_at < now - KEEP_ENDED,
            ConsoleSession.last_seen_at < now - SESSION_IDLE - KEEP_ENDED)))
    token = secrets.token_urlsafe(32)
    row = ConsoleSession(tenant_id=tenant_id, token_digest=digest(token), member_id=member_id, key_id=key_id,
                         csrf_token=secrets.token_urlsafe(32), created_at=now, last_seen_at=now,
                         expires_at=now + SESSION_MAX)
    session.add(row)
    session.flush()
    return Started(row, token)


def start_with_key(session: Session, raw_key: str, *, now: datetime) -> Started:
    """A session of the pasted key: Unauthorized for a bad key (as the API says it),
    Forbidden for one that cannot read (an ingest-only or partner-only key)."""
    caller = auth.authenticate(session, raw_key.strip(), now=now)
    if not READERS.intersection(caller.permissions):
        raise Forbidden("this key cannot read (it needs the permission read or full), so it cannot sign in")
    return start(session, caller.tenant_id, key_id=caller.key_id, now=now)


@dataclass(frozen=True)
class Signed:
    """A live session and who it acts as (the same Caller an API key makes)."""

    row: ConsoleSession
    caller: Caller
    name: str           # the member's email, or the key's label or prefix

    @property
    def test(self) -> bool:
        return self.caller.test


def resolve(session: Session, token: str | None, *, now: datetime) -> Signed | None:
    """The session of a cookie's token, or None when it is unknown, ended, expired, idle
    too long, or its member or key is gone (an unscoped session)."""
    if not token:
        return None
    row = session.scalars(select(ConsoleSession).where(ConsoleSession.token_digest == digest(token))).first()
    if row is None or row.ended_at is not None or row.expires_at <= now or row.last_seen_at + SESSION_IDLE <= now:
        return None
    tenant = session.get(Tenant, row.tenant_id)
    if tenant is None:
        return None
    found = _member_caller(session, row, tenant) if row.key_id is None else _key_caller(session, row, tenant)
    if found is None:
        return None
    if now - row.last_seen_at >= SEEN_RESOLUTION:
        session.execute(update(ConsoleSession).where(ConsoleSession.id == row.id).values(last_seen_at=now))
    caller, name = found
    return Signed(row, caller, name)


def _member_caller(session: Session, row: ConsoleSession, tenant: Tenant) -> tuple[Caller, str] | None:
    member = session.get(Member, row.member_id)
    if member is None or member.removed_at is not None:
        return None
    # a member's session uses no key: it acts with the member's role and every permission
    return Caller(tenant_id=tenant.id, key_id="", role=member.role, permissions=("full",), member_id=member.id,
                  test=False, plan_tier=tenant.plan_tier, partner=tenant.partner), member.email


def _key_caller(session: Session, row: ConsoleSession, tenant: Tenant) -> tuple[Caller, str] | None:
    key = session.get(ApiKey, row.key_id)
    if key is None or key.revoked_at is not None:
        return None
    role = key.role
    if key.member_id is not None:
        member = session.get(Member, key.member_id)
        if member is None or member.removed_at is not None:
            return None
        role = member.role
    return Caller(tenant_id=tenant.id, key_id=key.id, role=role, permissions=tuple(key.permissions),
                  member_id=key.member_id, test=key.test, plan_tier=tenant.plan_tier,
                  partner=tenant.partner), key.label or f"{key.prefix}…"


def end(session: Session, session_id: str, *, now: datetime) -> None:
    row = session.get(ConsoleSession, session_id)
    if row is not None and row.ended_at is None:
        row.ended_at = now


def set_data_view(session: Session, session_id: str, view: str) -> None:
    if view not in DATA_VIEWS:
        raise ValidationFailed(f"view must be one of {', '.join(DATA_VIEWS)}",
                               [{"field": "view", "message": f"must be one of {', '.join(DATA_VIEWS)}"}])
    session.execute(update(ConsoleSession).where(ConsoleSession.id == session_id).values(data_view=view))
