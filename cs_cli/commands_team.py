from __future__ import annotations

import typer

from cs_daemon.team import mail, service
from cs_daemon.team.models import ROLES
from cs_daemon.tenants import service as tenants

from . import params, tenant_option
from .context import runtime
from .output import print_json, success, table

app = typer.Typer(help="Team members and invitations.", no_args_is_help=True)


@app.command("list")
def list_(
    tenant: str = tenant_option.option(),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """Members and pending invitations."""
    with tenant_option.session(tenant) as (s, now):
        members = [{"id": m.id, "email": m.email, "name": m.name, "role": m.role, "created_at": m.created_at}
                   for m in service.members(s)]
        invitations = [{"id": i.id, "email": i.email, "role": i.role, "expires_at": i.expires_at}
                       for i in service.pending(s, now)]
    if json_:
        print_json({"members": members, "invitations": invitations})
        return
    table("Members", ["id", "email", "name", "role", "since"],
          [[m["id"], m["email"], m["name"], m["role"], m["created_at"]] for m in members])
    if invitations:
        table("Pending invitations", ["id", "email", "role", "expires"],
              [[i["id"], i["email"], i["role"], i["expires_at"]] for i in invitations])


@app.command("invite")
def invite(
    email: str = typer.Argument(..., help="Email address to invite."),
    role: str = typer.Option("viewer", "--role", help="admin, editor or viewer."),
    tenant: str = tenant_option.option(),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """Invite someone; prints the invitation token (valid 7 days) and emails it when SMTP_URL is set."""
    if role not in ROLES:
        raise typer.BadParameter(f"must be one of {', '.join(ROLES)}", param_hint="--role")
    email = params.email(email, "EMAIL")
    rt = runtime()
    with rt.session(tenant) as s:
        tenants.get(s, tenant, now=rt.now())
        invited = service.invite(s, tenant, email=email, role=role, invited_by="cli", now=rt.now())
        emailed = mail.queue(s, invited.invitation, invited.token, settings=rt.settings, now=rt.now()) is not None
        result = {"id": invited.invitation.id, "email": invited.invitation.email, "role": role,
                  "token": invited.token, "expires_at": invited.invitation.expires_at, "emailed": emailed}
    if json_:
        print_json(result)
    else:
        how = "the invitation email is queued" if emailed else "SMTP_URL is not set, so no email is sent"
        success(f"invited {result['email']} as {role}; token {result['token']} (accept with POST /api/team/accept); "
                f"{how}")
