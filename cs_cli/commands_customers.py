from __future__ import annotations

import typer
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from cs_daemon.customers import search, service
from cs_daemon.customers.schemas import CustomerListItem, NextAction
from cs_daemon.engine.scoring import RISK_LEVELS, STAGES
from cs_daemon.interventions.by_user import next_actions
from cs_daemon.customers.schemas import CustomerDetail, CustomerEvent, DecisionSummary
from cs_daemon.decisions import trace
from cs_daemon.interventions import by_user
from cs_daemon.interventions.schemas import InterventionPublic
from cs_daemon.tenants import service as tenants

from . import tenant_option
from .context import runtime
from .output import Failure, cell, out, print_json, styled, table

app = typer.Typer(help="Customers (the tenant's end users).", no_args_is_help=True)

STAGE_COLOURS = {"new": "cyan", "onboarding": "blue", "activated": "green", "engaged": "bold green",
                 "at_risk": "yellow", "dormant": "magenta", "churned": "red"}
RISK_COLOURS = {"low": "green", "medium": "yellow", "high": "red", "critical": "bold red"}


@app.command("list")
def list_(
    tenant: str = tenant_option.option(),
    stage: str = typer.Option(None, "--stage", help=f"Only this lifecycle stage ({', '.join(STAGES)})."),
    risk: str = typer.Option(None, "--risk", help=f"Only this risk level ({', '.join(RISK_LEVELS)})."),
    trait: str = typer.Option(None, "--trait", help="Only users with this trait (a segment, e.g. plan)..."),
    value: str = typer.Option(None, "--value", help="...equal to this value (true/false and numbers typed)."),
    search_: str = typer.Option(None, "--search", help="Text in the id, name, email or company."),
    limit: int = typer.Option(50, "--limit", min=1, max=1000, help="How many, newest first."),
    cursor: str = typer.Option(None, "--cursor", help="Continue after a page (its next_cursor)."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """The tenant's customers, newest first, with filters (the console's: stage, risk, a trait)."""
    _check_choice("--stage", stage, STAGES)
    _check_choice("--risk", risk, RISK_LEVELS)
    if value is not None and not trait:
        raise Failure("--value goes with --trait", "usage", 2)
    rt = runtime()
    with rt.session(tenant) as s:
        tree = search.filters(stage=stage, risk=risk, trait=trait, trait_value=value)
        page = search.find(s, now=rt.now(), q=search_, tree=tree, cursor=cursor, limit=limit)
        upcoming = next_actions(s, tenant, [c.id for c in page.customers])
        rows = [CustomerListItem.of(c, next_action=_next(upcoming.get(c.id))) for c in page.customers]
    if json_:
        print_json({"customers": [r.model_dump(mode="json") for r in rows], "next_cursor": page.next_cursor})
        return
    table("Customers", ["id", "name", "stage", "risk", "health", "last activity"],
          [[r.id, r.name if r.name != r.id else "", styled(r.lifecycle_stage, STAGE_COLOURS.get(r.lifecycle_stage, "white")),
            styled(r.risk_level, RISK_COLOURS.get(r.risk_level, "white")), f"{r.health:5.1f}", r.last_activity_at]
           for r in rows])
    if page.next_cursor:
        out.print(f"more: --cursor {page.next_cursor}", highlight=False)


def _next(action) -> NextAction | None:
    return None if action is None else NextAction(channel=action.channel, status=action.status,
                                                  playbook=action.playbook, intervention_id=action.intervention_id)


def _check_choice(option: str, value: str | None, allowed) -> None:
    if value is not None and value not in allowed:
        raise Failure(f"{option} must be one of {', '.join(allowed)}", "validation_failed", 2)


@app.command("show")
def show(
    user_id: str = typer.Argument(..., help="The tenant's user id."),
    tenant: str = tenant_option.option(),
    events: int = typer.Option(20, "--events", min=0, max=100, help="How many recent events to show."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """A customer's scores, stage, milestones, recent events, interventions (newest first, at most 100)
    and latest decisions, those that ended in no action too."""
    rt = runtime()
    with rt.session(tenant) as s:
        config = tenants.get(s, tenant, now=rt.now()).config
        customer = service.get(s, user_id)
        detail = CustomerDetail.of(customer,
                                   milestone_progress=service.milestone_progress(customer, config),
                                   segment_memberships=service.segment_memberships(customer, now=rt.now()))
        recent = [CustomerEvent.model_validate(e) for e in service.recent_events(s, user_id, limit=events)]
        done = [InterventionPublic.model_validate(iv) for iv in by_user.of_user(s, tenant, user_id)]
        decided = [DecisionSummary(**d) for d in trace.recent_for_user(s, user_id)]
    if json_:
        print_json({"customer": detail.model_dump(mode="json"),
                    "events": [e.model_dump(mode="json") for e in recent],
                    "interventions": [iv.model_dump(mode="json") for iv in done],
                    "decisions": [d.model_dump(mode="json") for d in decided]})
        return
    _render(detail, recent, done, decided)


def _render(c: CustomerDetail, recent: list[CustomerEvent], done: list[InterventionPublic],
            decided: list[DecisionSummary] = ()) -> None:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    stage = STAGE_COLOURS.get(c.lifecycle_stage, "white")
    risk = RISK_COLOURS.get(c.risk_level, "white")
    for label, value in [
        ("stage", styled(c.lifecycle_stage, stage)), ("risk", styled(c.risk_level, risk)),
        ("health", _bar(c.health)), ("activation", _bar(c.activation_score)),
        ("engagement", _bar(c.engagement_score)), ("expansion", _bar(c.expansion_score)),
        ("email", c.email or "—"), ("company", c.company or "—"), ("role", c.role or "—"),
        ("team size", "—" if c.team_size is None else f"{c.team_size:g}"), ("locale", c.locale or "—"),
        ("last activity", c.last_activity_at.isoformat(timespec="seconds") if c.last_activity_at else "never"),
        ("first seen", c.created_at.isoformat(timespec="seconds") if c.created_at else "—"),
    ]:
        facts.add_row(label, cell(value))
    progress = c.milestone_progress or {}
    if progress.get("milestones"):
        done = Text(" ").join(Text.assemble(styled("✓ ", "green") if m["done"] else styled("· ", "dim"), m["name"])
                              for m in progress["milestones"])
        facts.add_row("milestones", done)
    title = escape(c.name) + (f"  [dim]({escape(c.id)})[/]" if c.name != c.id else "") + ("  [yellow]TEST[/]" if c.test else "")
    out.print(Panel(facts, title=title, title_align="left", expand=False))
    if recent:
        table("Recent events", ["timestamp", "event", "source", "properties"],
              [[e.timestamp, e.event, e.source, _short(e.properties)] for e in recent])
    if done:
        table("Interventions", ["planned", "channel", "status", "source", "id"],
              [[iv.planned_at, iv.channel, iv.status + (" (test)" if iv.test else ""), iv.source, iv.id]
               for iv in done])
    if decided:
        table("Decisions (cs interventions trace ID for one's trace)",
              ["made", "action", "decided by", "channel", "why not / intervention", "decision"],
              [[d.created_at, d.action, d.decided_by, d.channel,
                d.reason or "" if d.action == "none" else d.intervention_id, d.decision_id]
               for d in decided])


def _bar(value: float, width: int = 20) -> Text:
    filled = int(round(value / 100 * width))
    colour = "green" if value >= 60 else "yellow" if value >= 40 else "red"
    return Text.assemble(styled("█" * filled, colour), styled("░" * (width - filled), "dim"), f" {value:5.1f}")


def _short(props: dict) -> str:
    text = ", ".join(f"{k}={v}" for k, v in props.items())
    return text if len(text) <= 60 else text[:57] + "…"
