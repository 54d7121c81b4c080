from __future__ import annotations

import typer
from rich.panel import Panel
from rich.table import Table

from cs_daemon.customers import service
from cs_daemon.customers.schemas import CustomerDetail, CustomerEvent
from cs_daemon.interventions import by_user
from cs_daemon.interventions.schemas import InterventionPublic
from cs_daemon.tenants import service as tenants

from .context import runtime
from .output import out, print_json, table

app = typer.Typer(help="Customers (the tenant's end users).", no_args_is_help=True)

STAGE_COLOURS = {"new": "cyan", "onboarding": "blue", "activated": "green", "engaged": "bold green",
                 "at_risk": "yellow", "dormant": "magenta", "churned": "red"}
RISK_COLOURS = {"low": "green", "medium": "yellow", "high": "red", "critical": "bold red"}


@app.command("show")
def show(
    user_id: str = typer.Argument(..., help="The tenant's user id."),
    tenant: str = typer.Option(..., "--tenant", help="Tenant id."),
    events: int = typer.Option(20, "--events", min=0, max=100, help="How many recent events to show."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """A customer's scores, stage, milestones, recent events and interventions (newest first, at most 100)."""
    rt = runtime()
    with rt.session(tenant) as s:
        config = tenants.get(s, tenant, now=rt.now()).config
        customer = service.get(s, user_id)
        detail = CustomerDetail.of(customer,
                                   milestone_progress=service.milestone_progress(customer, config),
                                   segment_memberships=service.segment_memberships(customer, now=rt.now()))
        recent = [CustomerEvent.model_validate(e) for e in service.recent_events(s, user_id, limit=events)]
        done = [InterventionPublic.model_validate(iv) for iv in by_user.of_user(s, tenant, user_id)]
    if json_:
        print_json({"customer": detail.model_dump(mode="json"),
                    "events": [e.model_dump(mode="json") for e in recent],
                    "interventions": [iv.model_dump(mode="json") for iv in done]})
        return
    _render(detail, recent, done)


def _render(c: CustomerDetail, recent: list[CustomerEvent], done: list[InterventionPublic]) -> None:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    stage = STAGE_COLOURS.get(c.lifecycle_stage, "white")
    risk = RISK_COLOURS.get(c.risk_level, "white")
    for label, value in [
        ("stage", f"[{stage}]{c.lifecycle_stage}[/]"), ("risk", f"[{risk}]{c.risk_level}[/]"),
        ("health", _bar(c.health)), ("activation", _bar(c.activation_score)),
        ("engagement", _bar(c.engagement_score)), ("expansion", _bar(c.expansion_score)),
        ("email", c.email or "—"), ("company", c.company or "—"), ("role", c.role or "—"),
        ("team size", "—" if c.team_size is None else f"{c.team_size:g}"), ("locale", c.locale or "—"),
        ("last activity", c.last_activity_at.isoformat(timespec="seconds") if c.last_activity_at else "never"),
        ("first seen", c.created_at.isoformat(timespec="seconds") if c.created_at else "—"),
    ]:
        facts.add_row(label, value)
    progress = c.milestone_progress or {}
    if progress.get("milestones"):
        done = " ".join(("[green]✓[/] " if m["done"] else "[dim]·[/] ") + m["name"] for m in progress["milestones"])
        facts.add_row("milestones", done)
    title = f"{c.name}" + (f"  [dim]({c.id})[/]" if c.name != c.id else "") + ("  [yellow]TEST[/]" if c.test else "")
    out.print(Panel(facts, title=title, title_align="left", expand=False))
    if recent:
        table("Recent events", ["timestamp", "event", "source", "properties"],
              [[e.timestamp, e.event, e.source, _short(e.properties)] for e in recent])
    if done:
        table("Interventions", ["planned", "channel", "status", "source", "id"],
              [[iv.planned_at, iv.channel, iv.status + (" (test)" if iv.test else ""), iv.source, iv.id]
               for iv in done])


def _bar(value: float, width: int = 20) -> str:
    filled = int(round(value / 100 * width))
    colour = "green" if value >= 60 else "yellow" if value >= 40 else "red"
    return f"[{colour}]{'█' * filled}[/][dim]{'░' * (width - filled)}[/] {value:5.1f}"


def _short(props: dict) -> str:
    text = ", ".join(f"{k}={v}" for k, v in props.items())
    return text if len(text) <= 60 else text[:57] + "…"
