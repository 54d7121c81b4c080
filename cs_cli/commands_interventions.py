from __future__ import annotations

import typer

from cs_daemon.errors import NotFound
from cs_daemon.interventions import service
from cs_daemon.interventions.models import Intervention
from cs_daemon.interventions.schemas import EscalationPublic, InterventionPublic

from . import tenant_option
from .context import runtime
from .output import print_json, success, table

app = typer.Typer(help="Interventions: review what the engine planned.", no_args_is_help=True)
escalations = typer.Typer(help="Escalations: users handed to the team.", no_args_is_help=True)

STATUS_STYLE = {"planned": "cyan", "approved": "blue", "sent": "blue", "delivered": "green", "failed": "red",
                "rejected": "dim", "rolled_back": "magenta", "shadow": "dim", "held_out": "dim",
                "open": "yellow",
                "handled": "green", "delegated": "blue"}


@app.command("list")
def list_(
    tenant: str = tenant_option.option(),
    status: str = typer.Option(None, "--status", help="Only this status (planned, approved, sent, delivered, "
                                                        "failed, rejected, rolled_back, shadow, "
                                                        "held_out)."),
    limit: int = typer.Option(50, "--limit", min=1, max=200, help="How many, newest first."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """The tenant's interventions, newest planned first."""
    rt = runtime()
    with rt.session(tenant) as s:
        rows = [InterventionPublic.model_validate(iv) for iv in service.list_recent(s, limit=limit, status=status)]
    if json_:
        print_json({"interventions": [r.model_dump(mode="json") for r in rows]})
        return
    table("Interventions", ["id", "user", "channel", "status", "confidence", "planned", "message"],
          [[r.id, r.user_id, r.channel, f"[{STATUS_STYLE.get(r.status, '')}]{r.status}[/]",
            "" if r.confidence is None else f"{r.confidence:.2f}", r.planned_at,
            (r.message_body or "")[:50] + ("…" if r.message_body and len(r.message_body) > 50 else "")] for r in rows])


def _act(intervention_id: str, verb: str, fn, json_: bool) -> None:
    rt = runtime()
    with rt.session() as s:
        found = s.get(Intervention, intervention_id)
        if found is None:
            raise NotFound(f"no intervention with id {intervention_id}")
        tenant_id = found.tenant_id
    with rt.session(tenant_id) as s:
        iv = fn(s, rt.now())
        result = {"id": iv.id, "status": iv.status, "flagged": iv.flagged}
    if json_:
        print_json(result)
    else:
        success(f"intervention {intervention_id} {verb}: now {result['status']}")


JSON = typer.Option(False, "--json", help="Print a JSON document.")


@app.command("approve")
def approve(intervention_id: str, json_: bool = JSON):
    """Approve a planned intervention; the pipeline delivers it."""
    _act(intervention_id, "approved", lambda s, now: service.approve(s, intervention_id, now=now), json_)


@app.command("pause")
def pause(intervention_id: str, json_: bool = JSON):
    """Hold a planned or approved intervention."""
    _act(intervention_id, "paused", lambda s, now: service.pause(s, intervention_id, now=now), json_)


@app.command("reject")
def reject(intervention_id: str, reason: str = typer.Option(..., "--reason", help="Why."), json_: bool = JSON):
    """Reject a planned intervention."""
    _act(intervention_id, "rejected", lambda s, now: service.reject(s, intervention_id, reason, now=now), json_)


@app.command("rollback")
def rollback(intervention_id: str, reason: str = typer.Option(None, "--reason", help="Why."), json_: bool = JSON):
    """Roll back approved, sent or delivered work."""
    _act(intervention_id, "rolled back", lambda s, now: service.rollback(s, intervention_id, reason, now=now), json_)


@app.command("flag")
def flag(intervention_id: str, reason: str = typer.Option(..., "--reason", help="Why."), json_: bool = JSON):
    """Flag an intervention for review."""
    _act(intervention_id, "flagged", lambda s, now: service.flag(s, intervention_id, reason, now=now), json_)


@escalations.command("list")
def list_escalations(
    tenant: str = tenant_option.option(),
    status: str = typer.Option(None, "--status", help="Only this status (open, handled, delegated)."),
    limit: int = typer.Option(50, "--limit", min=1, max=200, help="How many, newest first."),
    json_: bool = JSON,
):
    """The tenant's escalations, newest first."""
    rt = runtime()
    with rt.session(tenant) as s:
        rows = [EscalationPublic.of(iv) for iv in service.list_recent(s, limit=limit, escalations=True, status=status)]
    if json_:
        print_json({"escalations": [r.model_dump(mode="json") for r in rows]})
        return
    table("Escalations", ["id", "user", "severity", "status", "created", "reason", "handled by"],
          [[r.id, r.user_id, r.severity or "", f"[{STATUS_STYLE.get(r.status or '', '')}]{r.status}[/]",
            r.created_at, (r.reasoning or "")[:50], r.handled_by or ""] for r in rows])
