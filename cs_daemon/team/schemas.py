from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import EmailStr, Field, UUID4

from ..schemas import Wire

Role = Literal["admin", "editor", "viewer"]


class MemberPublic(Wire):
    id: str
    user_id: str
    role: str
    created_at: datetime
    name: str | None
    email: str


class MemberList(Wire):
    members: list[MemberPublic]


class MemberResponse(Wire):
    member: MemberPublic


class InvitationPublic(Wire):
    id: str
    email: str
    role: str
    status: str
    expires_at: datetime
    created_at: datetime
    invited_by: str | None
    test: bool = False


class InvitationWithToken(InvitationPublic):
    token: str


class InvitationList(Wire):
    invitations: list[InvitationPublic]


class InvitationCreated(Wire):
    invitation: InvitationWithToken


class InviteBody(Wire):
    email: EmailStr
    role: Role = "viewer"


class AcceptBody(Wire):
    token: UUID4
    # extension: how the team sees the new member (`name` of the member list)
    name: str | None = Field(None, min_length=1, max_length=200)


class AcceptResult(Wire):
    tenant_id: str
    role: str
    member_id: str
    api_key: str


class RoleBody(Wire):
    role: Role


class Removed(Wire):
    removed: bool


class RevokedInvitation(Wire):
    revoked: bool
