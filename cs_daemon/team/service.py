"""Team members and invitations (docs/api.md, "Team" and "Plans")."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .. import plans
from ..auth import service as auth
from ..db import locked, write_lock
from ..errors import Conflict, Gone, NotFound, PlanLimit, ValidationFailed
from ..tenants import service as tenants
from .models import Invitation, Member

INVITATION_TTL = timedelta(days=7)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def members(session: Session) -> list[Member]:
    return list(session.scalars(select(Member).where(Member.removed_at.is_(None)).order_by(Member.created_at)))


def pending(session: Session, now: datetime) -> list[Invitation]:
    return list(session.scalars(select(Invitation).where(Invitation.status == "pending", Invitation.expires_at > now)
                                .order_by(Invitation.created_at)))


def _seats(session: Session, now: datetime) -> int:
    return len(members(session)) + len(pending(session, now))


@dataclass(frozen=True)
class Invited:
    invitation: Invitation
    token: str


def invite(session: Session, tenant_id: str, *, email: str, role: str, invited_by: str, now: datetime,
           test: bool = False) -> Invited:
    email = email.strip().lower()
    tenant = tenants.locked_for_limits(session, tenant_id)     # the checks below hold until commit
    if any(m.email.lower() == email for m in members(session)):
        raise Conflict(f"{email} is already a member of this team")
    if any(i.email.lower() == email for i in pending(session, now)):
        raise Conflict(f"{email} already has a pending invitation")
    plan = plans.plan(tenant.plan_tier)
    current = _seats(session, now)
    if plan.team is not None and current >= plan.team:
        raise PlanLimit(f"the {tenant.plan_tier} plan allows {plan.team} team members and pending invitations",
                        current=current, limit=plan.team, upgrade_to=plan.upgrade_to)
    token = str(uuid.uuid4())
    invitation = Invitation(tenant_id=tenant_id, email=email, role=role, status="pending", token_digest=_digest(token),
                            invited_by=invited_by, test=test, expires_at=now + INVITATION_TTL, created_at=now)
    session.add(invitation)
    session.flush()
    return Invited(invitation, token)


@dataclass(frozen=True)
class Accepted:
    member: Member
    key: auth.IssuedKey


def open_invitation(session: Session, token: str, *, now: datetime, lock: bool = False) -> Invitation:
    """The pending invitation the token opens: 404 unknown or revoked, 409 accepted, 410
    expired. With `lock`, read locked: still pending at commit."""
    invitation = session.scalars(select(Invitation).where(Invitation.token_digest == _digest(token))).first()
    if invitation is not None and lock:
        invitation = locked(session, Invitation, invitation.id)
    if invitation is None or invitation.status == "revoked":
        raise NotFound("invitation not found")
    if invitation.status == "accepted":
        raise Conflict("this invitation was already accepted")
    if invitation.expires_at <= now:
        raise Gone("this invitation has expired")
    return invitation


def accept(session: Session, token: str, *, now: datetime, name: str | None = None) -> Accepted:
    """The token is the credential (no bearer key); it makes the member and a personal key
    (a test key when a test key invited: a test key cannot mint a live one, even so),
    once: the invitation is read locked, so of concurrent accepts one finds it pending and
    the others find it accepted (409). The database holds one live member per email and
    tenant besides (ux_members_email)."""
    invitation = open_invitation(session, token, now=now, lock=True)
    invitation.status, invitation.accepted_at = "accepted", now
    if _live_member(session, invitation.tenant_id, invitation.email):
        raise Conflict(f"{invitation.email} is already a member of this team")
    member = Member(tenant_id=invitation.tenant_id, email=invitation.email, name=name, role=invitation.role,
                    created_at=now)
    session.add(member)
    try:
        session.flush()
    except IntegrityError:
        raise Conflict(f"{invitation.email} is already a member of this team") from None
    key = auth.issue(session, invitation.tenant_id, role=invitation.role, permissions=["full"], now=now,
                     label=f"personal key of {invitation.email}", member_id=member.id, test=invitation.test)
    return Accepted(member, key)


def _live_member(session: Session, tenant_id: str, email: str) -> bool:
    return session.scalar(select(func.count()).select_from(Member).where(
        Member.tenant_id == tenant_id, func.lower(Member.email) == email.lower(), Member.removed_at.is_(None))) > 0


def _member(session: Session, member_id: str) -> Member:
    member = session.get(Member, member_id)
    if member is None or member.removed_at is not None:
        raise NotFound("team member not found")
    return member


def _last_admin(session: Session, member: Member) -> bool:
    """Whether the member is the tenant's only admin, read with the admins' rows locked
    until commit (in id order; SQLite: its write lock): two admins demoting or removing
    each other at once take turns, and the second sees the first's change."""
    write_lock(session)
    admins = session.scalars(select(Member.id).where(Member.role == "admin", Member.removed_at.is_(None))
                             .order_by(Member.id).with_for_update()).all()
    return admins == [member.id]


def change_role(session: Session, member_id: str, role: str) -> Member:
    member = _member(session, member_id)
    if role != "admin" and _last_admin(session, member):
        raise ValidationFailed("the last admin cannot be demoted", [{"field": "role", "message": "last admin"}])
    member.role = role
    auth.follow_role(session, member.id, role)   # their keys show the role they now act with
    return member


def remove(session: Session, member_id: str, *, caller_member_id: str | None, now: datetime) -> Member:
    member = _member(session, member_id)
    if caller_member_id == member.id:
        raise ValidationFailed("you cannot remove yourself from the team", [{"field": "memberId", "message": "yourself"}])
    if _last_admin(session, member):
        raise ValidationFailed("the last admin cannot be removed", [{"field": "memberId", "message": "last admin"}])
    member.removed_at = now    # their keys stop working (authentication checks the member)
    auth.revoke_keys_of(session, member.id, now=now)     # and are listed as revoked
    auth.revoke_minted_by(session, member.id, now=now)   # and so do the keys they minted
    return member


def revoke(session: Session, invitation_id: str) -> Invitation:
    """A pending invitation is revoked; read locked, so an accept at the same moment either
    comes first (then it is not pending) or finds it revoked."""
    invitation = locked(session, Invitation, invitation_id)
    if invitation is None or invitation.status != "pending":
        raise NotFound("invitation not found")
    invitation.status = "revoked"
    return invitation
