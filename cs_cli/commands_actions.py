"""`cs actions`: the on-call view of external actions (docs/external-actions.md): a tenant's dispatch
log, and one action with the attempts of its signed dispatch and its outcome. The same
service functions as `GET /api/external/actions`."""

from __future__ import annotations

from datetime import timedelta
from enum import Enum

import typer
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from sqlalchemy.orm import Session

from cs_daemon.delivery import service as delivery
from cs_daemon.errors import NotFound
from cs_daemon.external import service as external
from cs_daemon.external.models import ExternalAction
from cs_daemon.external.schemas import ActionPublic
from cs_daemon.tenants import service as tenants
from cs_daemon.webhooks.schemas import DeliveryPublic

from . import tenant_option
from .commands_webhooks import _excerpt, _last_result, _short_time, _when, since_option
from .context import runtime
from .output import cell, listed, out, print_json, styled, table

app = typer.Typer(help="External actions: the dispatch log, attempts and outcomes.", no_args_is_help=True)

STATUS_COLOURS = {"pending": "cyan", "dispatched": "blue", "delivered": "yellow", "completed": "green",
                  "failed": "red", "expired": "dim"}
DELIVERY_COLOURS = {"pending": "cyan", "retrying": "yellow", "delivered": "green", "failed": "red",
                    "canceled": "dim"}


class Status(str, Enum):
    pending = "pending"
    dispatched = "dispatched"
    delivered = "delivered"
    completed = "completed"
    failed = "failed"
    expired = "expired"


def _status(status: str | None, colours: dict[str, str] = STATUS_COLOURS) -> Text | str:
    return styled(status, colours.get(status, "white")) if status else "—"


# -- the log ---------------------------------------------------------------------------------

@app.command("list")
def list_(
    tenant: str = tenant_option.option(),
    status: Status = typer.Option(None, "--status", help="Only actions in this status."),
    provider: str = typer.Option(None, "--provider", help="Only actions of this provider."),
    user_id: str = typer.Option(None, "--user-id", help="Only actions for this user."),
    since: timedelta = since_option("Only actions created in this window: 30m, 1h, 24h, 7d."),
    limit: int = typer.Option(50, "--limit", min=1, max=100, help="At most this many, newest first."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """A tenant's external actions, newest first."""
    with tenant_option.session(tenant) as (s, now):
        rows = external.list_actions(s, status=status.value if status else None, provider=provider,
                                     user_id=user_id, since=now - since if since else None, limit=limit)
        actions = [ActionPublic.model_validate(a) for a in rows]
    listed(json_, "actions", actions, "no external actions match", _log_table)


def _log_table(actions: list[ActionPublic]) -> None:
    table("External actions (newest first, times in UTC)",
          ["id", "action type", "provider", "user", "status", "attempts", "outcome", "created"],
          [[a.id, a.action_type, a.provider or "", a.user_id, _status(a.status), a.attempts,
            a.outcome_status or "—", _short_time(a.created_at)] for a in actions])


# -- one action ------------------------------------------------------------------------------

@app.command("show")
def show(
    action_id: str = typer.Argument(..., metavar="ACTION_ID", help="Action id (from `cs actions list`)."),
    tenant: str = tenant_option.option(required=False, help="Only look in this tenant (id or slug; default: CS_TENANT)."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """One external action (of any tenant, or of --tenant), its dispatch attempts and outcome."""
    rt = runtime()
    with rt.session(tenant) as s:
        if tenant:
            tenants.get(s, tenant, now=rt.now())
        row = _find(s, action_id)
        item = ActionPublic.model_validate(row)
        dispatch = _dispatch(s, action_id)
    if json_:
        print_json({"action": {**item.model_dump(mode="json"), "tenant_id": row.tenant_id,
                               "delivered_at": row.delivered_at,
                               "dispatch": dispatch.model_dump(mode="json") if dispatch else None}})
        return
    _render(item, row, dispatch)


def _find(session: Session, action_id: str) -> ExternalAction:
    try:
        return external.get_action(session, action_id)
    except NotFound:
        raise NotFound(f"no external action with id {action_id}") from None


def _dispatch(session: Session, action_id: str) -> DeliveryPublic | None:
    made = external.dispatch_of(session, action_id)
    if made is None:
        return None
    return DeliveryPublic.of(made, delivery.attempts_of(session, [made.id])[made.id])


def _render(item: ActionPublic, row: ExternalAction, dispatch: DeliveryPublic | None) -> None:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    for label, value in [
        ("status", _status(item.status)), ("action type", item.action_type), ("provider", item.provider or "—"),
        ("user", item.user_id), ("tenant", row.tenant_id),
        ("confidence", "—" if row.confidence is None else f"{row.confidence:.2f}"),
        ("created", _when(item.created_at)), ("dispatched", _when(item.dispatched_at)),
        ("delivered", _when(row.delivered_at)), ("completed", _when(item.completed_at)),
    ]:
        facts.add_row(label, cell(value))
    title = f"external action {item.id}" + ("  [yellow]TEST[/]" if item.test else "")
    out.print(Panel(facts, title=title, title_align="left", expand=False))
    if item.parameters:
        table("Parameters", ["name", "value"], [[k, v] for k, v in item.parameters.items()])
    _render_dispatch(dispatch)
    _render_outcome(item)


def _render_dispatch(dispatch: DeliveryPublic | None) -> None:
    if dispatch is None:
        out.print("[dim]no dispatch was made[/dim]")
        return
    status = f"[{DELIVERY_COLOURS.get(dispatch.status, 'white')}]{dispatch.status}[/]"
    out.print(f"dispatch {dispatch.id} to {escape(dispatch.url)}: {status}, "
              f"{len(dispatch.attempts)} attempt(s)"
              + (f", last result {escape(_last_result(dispatch))}" if dispatch.attempts else "")
              + (f", next attempt {_when(dispatch.next_attempt_at)}" if dispatch.next_attempt_at else ""))
    if dispatch.attempts:
        table("Dispatch attempts", ["#", "at (UTC)", "status code", "latency", "error", "response"],
              [[a.number, _short_time(a.at), a.status_code, f"{a.latency_ms:.0f} ms", a.error or "",
                _excerpt(a.response_excerpt)] for a in dispatch.attempts])


def _render_outcome(item: ActionPublic) -> None:
    if item.outcome_status is None:
        out.print("outcome: [dim]none reported yet[/dim]")
        return
    result = ", ".join(f"{k}={v}" for k, v in (item.outcome_result or {}).items())
    out.print(f"outcome: [bold]{item.outcome_status}[/bold]" + (f" ({escape(result)})" if result else "")
              + f" at {_when(item.completed_at)}")
