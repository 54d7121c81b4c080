from __future__ import annotations

from datetime import datetime, timedelta, timezone

import typer
from rich.markup import escape
from rich.table import Table

from cs_daemon.decisions import evaluation, service
from cs_daemon.decisions.schemas import DryRunResponse
from cs_daemon.tenants import service as tenants

from . import tenant_option
from .context import runtime
from .commands_webhooks import LONGEST
from .output import cell, out, print_json, styled

app = typer.Typer(help="The decision engine.", no_args_is_help=True)

VERDICT_STYLE = {"picked": "bold green", "eligible": "green", "rejected": "yellow",
                 "not_matched": "dim", "not_triggered": "cyan"}


@app.command("dry-run")
def dry_run(
    user_id: str = typer.Argument(..., help="The tenant's user id."),
    tenant: str = tenant_option.option(),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """The decision the engine would take for a user now, and why each playbook matched
    or not. Nothing is created."""
    rt = runtime()
    with rt.session(tenant, commit=False) as s:
        tenants.get(s, tenant, now=rt.now())
        made, customer, agent, trace = service.dry_run_with_agent(s, user_id, now=rt.now(), writer=rt.writer)
        body = DryRunResponse.of(made, customer, agent, trace)
    if json_:
        print_json(body.model_dump(mode="json"))
        return
    d = body.decision
    if d.action == "none":
        out.print(f"[bold]decision:[/bold] none — {escape(d.reason or '')}", highlight=False)
    else:
        target = d.channel or d.action_type or ""
        out.print(f"[bold]decision:[/bold] [green]{d.action}[/green] {escape(target)} "
                  f"(confidence {d.confidence}) via playbook {d.playbook_id}", highlight=False)
        out.print(f"  {escape(d.reasoning or '')}", highlight=False)
    c = body.context
    out.print(f"[dim]user {escape(user_id)}: stage {c.lifecycle_stage}, risk {c.risk_level}, activation "
              f"{c.activation_score:g}; {c.matched_playbooks} active playbooks match[/dim]", highlight=False)
    rules = Table(title="Playbooks", title_justify="left", header_style="bold")
    for col in ("playbook", "verdict", "why", "channel", "confidence"):
        rules.add_column(col, overflow="fold")
    for verdict in body.rules.values():
        style = VERDICT_STYLE.get(verdict["verdict"], "")
        rules.add_row(cell(verdict["name"]), styled(verdict["verdict"], style), cell(verdict["why"]),
                      cell(verdict["channel"] or ""), "" if verdict["confidence"] is None else str(verdict["confidence"]))
    out.print(rules)


def _since(text: str | None, now):
    """`7d`, `12h` (before now) or an ISO 8601 date and time (UTC without a zone)."""
    if text is None:
        return None
    unit = {"d": "days", "h": "hours"}.get(text[-1:])
    if unit and text[:-1].isdigit():
        span = timedelta(**{unit: int(text[:-1])}) if len(text) < 12 else None
        if span is None or span > LONGEST:
            raise typer.BadParameter("--since goes back at most 3650d")
        return now - span
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter("--since takes 7d, 12h or an ISO 8601 date and time") from None
    at = at if at.tzinfo else at.replace(tzinfo=timezone.utc)
    if at < now - LONGEST:
        raise typer.BadParameter("--since goes back at most 3650d")
    return at


@app.command("evaluate")
def evaluate(
    tenant: str = tenant_option.option(),
    since: str | None = typer.Option(None, "--since", help="Only decisions since: 7d, 12h or an ISO date and time."),
    domain: str | None = typer.Option(None, "--domain", help="Only recommendations of this domain."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """How each single action, uniform random and the current learned policy would have
    done on the logged recommendations with an outcome (docs/decisions.md)."""
    rt = runtime()
    start = _since(since, rt.now())
    with rt.session(tenant, commit=False) as s:
        tenants.get(s, tenant, now=rt.now())
        body = evaluation.evaluate_policies(s, since=start, domain=domain)
    if json_:
        print_json(body)
        return
    table = Table(title=f"{body['decisions']} logged decisions with an outcome", title_justify="left",
                  header_style="bold")
    for col in ("policy", "success rate", "95% interval", "decisions", "doubly robust"):
        table.add_column(col)
    for e in body["estimates"]:
        rate = "—" if e["success_rate"] is None else f"{e['success_rate']:.1%}"
        ci = "—" if e["ci"] is None else f"{e['ci'][0]:.1%} to {e['ci'][1]:.1%}"
        dr = e.get("doubly_robust")
        robust = "—" if dr is None else f"{dr['estimate']:.1%} ({dr['ci'][0]:.1%} to {dr['ci'][1]:.1%})"
        table.add_row(e["policy"], rate, ci, str(e["decisions"]), robust)
    out.print(table)
