from __future__ import annotations

import typer
from rich.table import Table

from cs_daemon.decisions import service
from cs_daemon.decisions.schemas import DryRunResponse
from cs_daemon.tenants import service as tenants

from . import tenant_option
from .context import runtime
from .output import out, print_json

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
        made, customer = service.dry_run(s, user_id, now=rt.now())
        body = DryRunResponse.of(made, customer)
    if json_:
        print_json(body.model_dump(mode="json"))
        return
    d = body.decision
    if d.action == "none":
        out.print(f"[bold]decision:[/bold] none — {d.reason}")
    else:
        target = d.channel or d.action_type or ""
        out.print(f"[bold]decision:[/bold] [green]{d.action}[/green] {target} "
                  f"(confidence {d.confidence}) via playbook {d.playbook_id}")
        out.print(f"  {d.reasoning}", highlight=False)
    c = body.context
    out.print(f"[dim]user {user_id}: stage {c.lifecycle_stage}, risk {c.risk_level}, activation "
              f"{c.activation_score:g}; {c.matched_playbooks} active playbooks match[/dim]")
    rules = Table(title="Playbooks", title_justify="left", header_style="bold")
    for col in ("playbook", "verdict", "why", "channel", "confidence"):
        rules.add_column(col, overflow="fold")
    for verdict in body.rules.values():
        style = VERDICT_STYLE.get(verdict["verdict"], "")
        rules.add_row(verdict["name"], f"[{style}]{verdict['verdict']}[/]", verdict["why"],
                      verdict["channel"] or "", "" if verdict["confidence"] is None else str(verdict["confidence"]))
    out.print(rules)
