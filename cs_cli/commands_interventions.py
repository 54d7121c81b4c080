from __future__ import annotations

import typer
from rich.markup import escape

from cs_daemon.decisions import trace
from cs_daemon.decisions.schemas import TraceResponse
from cs_daemon.errors import NotFound
from cs_daemon.interventions import service
from cs_daemon.interventions.models import Intervention
from cs_daemon.interventions.schemas import EscalationPublic, InterventionPublic

from . import tenant_option
from .context import runtime
from .output import out, print_json, styled, success, table

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
          [[r.id, r.user_id, r.channel, styled(r.status, STATUS_STYLE.get(r.status, "")),
            "" if r.confidence is None else f"{r.confidence:.2f}", r.planned_at,
            (r.message_body or "")[:50] + ("…" if r.message_body and len(r.message_body) > 50 else "")] for r in rows])


def _tenant_of(rt, intervention_id: str) -> str:
    """The tenant whose intervention this is (an operator's command names only the id)."""
    with rt.session() as s:
        found = s.get(Intervention, intervention_id)
        if found is None:
            raise NotFound(f"no intervention with id {intervention_id}")
        return found.tenant_id


def _act(intervention_id: str, verb: str, fn, json_: bool) -> None:
    rt = runtime()
    tenant_id = _tenant_of(rt, intervention_id)
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


@app.command("trace")
def trace_(intervention_id: str, json_: bool = JSON):
    """Why the engine made this intervention: the user's features, each playbook's verdict,
    the options with their estimates, the agent's steps, the drafts and the choice."""
    rt = runtime()
    with rt.session(_tenant_of(rt, intervention_id), commit=False) as s:
        found = trace.of_intervention(s, intervention_id)
    body = TraceResponse(trace=found).model_dump(mode="json")     # as the API answers it
    if json_:
        print_json(body)
        return
    _render_trace(body["trace"])


def _cell(value) -> str:
    return "" if value is None else str(value)


def _render_trace(t: dict) -> None:
    choice = t.get("choice") or {}
    out.print(f"[bold]decision {t['decision_id']}[/bold] for user {escape(t['user_id'])}: "
              f"[green]{escape(str(t['action']))}[/green] decided by [bold]{t['decided_by']}[/bold]"
              + ("" if t.get("propensity") is None else f" (propensity {t['propensity']:.2f})"), highlight=False)
    if choice.get("reasoning"):
        out.print(f"  {escape(str(choice['reasoning']))}", highlight=False)
    if t.get("reason"):
        out.print(f"  reason: {escape(str(t['reason']))}", highlight=False)
    table("Features", ["feature", "value"], [[k, _cell(v)] for k, v in (t.get("features") or {}).items()])
    table("Rules", ["playbook", "verdict", "why", "channel", "confidence"],
          [[r.get("name") or r.get("playbook_id") or "", r.get("verdict"), _cell(r.get("why")),
            r.get("channel"), r.get("confidence")] for r in t.get("rules") or []])
    table("Options", ["option", "scope", "estimate", "uncertainty", "successes", "trials", "probability"],
          [[_cell(o.get("option")), o.get("scope") or o.get("kind"), o.get("estimate"), o.get("uncertainty"),
            o.get("successes"), o.get("trials"), o.get("probability")] for o in t.get("options") or []])
    agent = t.get("agent") or {}
    if agent.get("steps"):
        table("Agent steps", ["step", "tool", "arguments", "result", "ms", "tokens"],
              [[s.get("step"), s.get("tool"), _cell(s.get("arguments")), _cell(s.get("result_summary")),
                s.get("duration_ms"), s.get("tokens")] for s in agent["steps"]])
    if agent.get("fallback_reason"):
        out.print(f"[yellow]agent fell back:[/yellow] {escape(str(agent['fallback_reason']))}", highlight=False)
    if t.get("drafts"):
        table("Drafts", ["option", "message", "checks"],
              [[_cell(d.get("option_id")), _cell(d.get("message")), _checks(d.get("checks"))] for d in t["drafts"]])
    out.print(f"[dim]tokens {t.get('tokens') or 0}; made {t['created_at']}[/dim]", highlight=False)


def _checks(checks) -> str:
    if not isinstance(checks, list):
        return _cell(checks)
    return ", ".join(f"{c.get('check', '?')}: {'pass' if c.get('passed') else 'FAIL'}"
                     for c in checks if isinstance(c, dict))


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
          [[r.id, r.user_id, r.severity or "", styled(r.status, STATUS_STYLE.get(r.status or "", "")),
            r.created_at, (r.reasoning or "")[:50], r.handled_by or ""] for r in rows])
