"""Team members and invitations."""

from __future__ import annotations

import html

from flask import Response
from pydantic import UUID4

from cs_daemon.schemas import Wire
from cs_daemon.team import mail, service
from cs_daemon.team.schemas import (
    AcceptBody, AcceptResult, InvitationCreated, InvitationList, InvitationPublic, InvitationWithToken, InviteBody,
    MemberList, MemberPublic, MemberResponse, Removed, RevokedInvitation, RoleBody,
)
from cs_daemon.tenants.models import Tenant

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
                             invited_by=call.caller.actor, now=call.now, test=call.caller.test)
    for hook in INVITE_HOOKS:
        hook(call, invited)
    public = InvitationPublic.model_validate(invited.invitation).model_dump()
    return InvitationCreated(invitation=InvitationWithToken(**public, token=invited.token))


def _email_invitation(call: Call, invited) -> None:
    mail.queue(call.session, invited.invitation, invited.token, settings=call.rt.settings, now=call.now,
               test=call.caller.test)


INVITE_HOOKS: list = [_email_invitation]   # the invitation email, when SMTP is configured


class AcceptQuery(Wire):
    token: UUID4


@api.route("GET", "/api/team/accept", access="public", query=AcceptQuery, errors=(404, 409, 410),
           summary="The invitation email's accept link: a page whose button makes the POST (a GET accepts nothing)")
def get_accept(call: Call):
    invitation = service.open_invitation(call.session, str(call.query.token), now=call.now)
    team = call.session.get(Tenant, invitation.tenant_id).name
    return Response(_accept_page(team, invitation.email, invitation.role), mimetype="text/html")


@api.route("POST", "/api/team/accept", access="public", body=AcceptBody, response=AcceptResult, errors=(404, 409, 410),
           summary="Accept an invitation (the token is the credential); answers a personal API key once")
def post_accept(call: Call):
    accepted = service.accept(call.session, str(call.body.token), name=call.body.name, now=call.now)
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


# Mail scanners follow links, so the link only shows this page; the person's click POSTs
# the token from the page's own address and shows the key it answers, once.
ACCEPT_SCRIPT = """
document.getElementById("accept").onclick = async (e) => {
  e.target.disabled = true;
  const token = new URLSearchParams(location.search).get("token");
  const name = document.getElementById("name").value.trim() || undefined;
  const resp = await fetch(location.pathname, {method: "POST", headers: {"Content-Type": "application/json"},
                                               body: JSON.stringify({token, name})});
  const body = await resp.json();
  document.getElementById("result").textContent = resp.ok
    ? "You are a member (" + body.role + "). Your personal API key, shown once:\\n\\n" + body.api_key
    : "Not accepted: " + body.error;
};
"""


def _accept_page(team: str, email: str, role: str) -> str:
    e = html.escape
    return ("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Join " + e(team) + "</title></head>\n<body>\n"
            f"<h1>Join {e(team)}</h1>\n<p>{e(email)} is invited as {e(role)}.</p>\n"
            '<p><label>Your name (shown to the team) <input id="name" maxlength="200"></label></p>\n'
            '<p><button id="accept">Accept the invitation</button></p>\n<pre id="result"></pre>\n'
            f"<script>{ACCEPT_SCRIPT}</script>\n</body></html>\n")
