"""Team members and invitations."""

from __future__ import annotations

from cs_daemon.team import service
from cs_daemon.team.schemas import (
    AcceptBody, AcceptResult, InvitationCreated, InvitationList, InvitationPublic, InvitationWithToken, InviteBody,
    MemberList, MemberPublic, MemberResponse, Removed, RevokedInvitation, RoleBody,
)

from ..api import Api, Call

api = Api("Team")


@api.route("GET", "/api/team/members", access="read", response=MemberList, summary="Team members")
def get_members(call: Call):
    return MemberList(members=[MemberPublic.model_validate(m) for m in service.members(call.session)])


@api.route("GET", "/api/team/invitations", access="read", response=InvitationList,
           summary="Pending invitations (tokens are never listed)")
def get_invitations(call: Call):
    return InvitationList(invitations=[InvitationPublic.model_validate(i) for i in service.pending(call.session, call.now)])


@api.route("POST", "/api/team/invite", access="admin", body=InviteBody, response=InvitationCreated, status=201,
           errors=(403, 409), summary="Invite someone by email; the token is returned once (and emailed)")
def post_invite(call: Call):
    invited = service.invite(call.session, call.tenant_id, email=str(call.body.email), role=call.body.role,
                             invited_by=call.caller.actor, now=call.now)
    for hook in INVITE_HOOKS:
        hook(call, invited)
    public = InvitationPublic.model_validate(invited.invitation).model_dump()
    return InvitationCreated(invitation=InvitationWithToken(**public, token=invited.token))


INVITE_HOOKS: list = []   # e.g. the invitation email, when SMTP is configured


@api.route("POST", "/api/team/accept", access="public", body=AcceptBody, response=AcceptResult, errors=(404, 409, 410),
           summary="Accept an invitation (the token is the credential); answers a personal API key once")
def post_accept(call: Call):
    accepted = service.accept(call.session, str(call.body.token), now=call.now)
    return AcceptResult(tenant_id=accepted.member.tenant_id, role=accepted.member.role, member_id=accepted.member.id,
                        api_key=accepted.key.secret)


@api.route("PUT", "/api/team/members/{member_id}/role", access="admin", body=RoleBody, response=MemberResponse,
           errors=(400, 404), summary="Change a member's role (the last admin stays admin)")
def put_member_role(call: Call, member_id: str):
    return MemberResponse(member=MemberPublic.model_validate(service.change_role(call.session, member_id, call.body.role)))


@api.route("DELETE", "/api/team/members/{member_id}", access="admin", response=Removed, errors=(400, 404),
           summary="Remove a member (not yourself, not the last admin); their keys stop working")
def delete_member(call: Call, member_id: str):
    service.remove(call.session, member_id, caller_member_id=call.caller.member_id, now=call.now)
    return Removed(removed=True)


@api.route("DELETE", "/api/team/invitations/{invitation_id}", access="admin", response=RevokedInvitation,
           errors=(404,), summary="Revoke a pending invitation")
def delete_invitation(call: Call, invitation_id: str):
    service.revoke(call.session, invitation_id)
    return RevokedInvitation(revoked=True)
