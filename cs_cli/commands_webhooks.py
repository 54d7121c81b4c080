"""`cs webhooks`: the on-call view of outbound deliveries (docs/webhooks.md, "The delivery log and replay"): the delivery
log of a tenant, one delivery with every attempt, and replay of one delivery or of every
failed one in a window. A replay is the flow `POST /api/webhooks/deliveries/{id}/replay`
runs (cs_daemon/flows/replay.py): reopen (committed), then one attempt now, same id, body
and event id."""

from __future__ import annotations

import re
import sys
from datetime import timedelta
from enum import Enum

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from sqlalchemy.orm import Session

from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.errors import InvalidState, NotFound
from cs_daemon.flows import replay as replay_flow
from cs_daemon.runtime import Runtime
from cs_daemon.tenants import service as tenants
from cs_daemon.webhooks import service as webhooks
from cs_daemon.webhooks.schemas import DeliveryPublic, EndpointPublic

from . import tenant_option
from .context import runtime
from .output import Failure, cell, listed, out, print_json, styled, success, table

app = typer.Typer(help="Outbound webhook deliveries: the log, attempts and replay.", no_args_is_help=True)

STATUS_COLOURS = {"pending": "cyan", "retrying": "yellow", "delivered": "green", "failed": "red",
                  "canceled": "dim"}
DURATION = re.compile(r"^(\d+)([smhd])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
LONGEST = timedelta(days=3650)
DEFAULT_REPLAY_WINDOW = timedelta(hours=24)


class Status(str, Enum):
    pending = "pending"
    retrying = "retrying"
    delivered = "delivered"
    failed = "failed"
    canceled = "canceled"


def parse_since(value: str) -> timedelta:
    """`30m`, `1h`, `24h`, `7d` (also `s`) → a window ending now."""
    match = DURATION.match(value.strip().lower())
    window = timedelta(**{UNITS[match[2]]: int(match[1])}) if match and len(match[1]) < 9 else None
    if not window or window > LONGEST:
        raise typer.BadParameter(f"{value!r} is not a duration such as 30m, 1h, 24h or 7d (up to 3650d)",
                                 param_hint="--since")
    return window


def since_option(help: str) -> typer.models.OptionInfo:
    return typer.Option(None, "--since", parser=parse_since, metavar="DURATION", help=help)


# -- endpoints -------------------------------------------------------------------------------

@app.command("endpoints")
def endpoints(
    tenant: str = tenant_option.option(),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """The tenant's active webhook endpoints (never their signing secrets), oldest first."""
    rt = runtime()
    with rt.session(tenant) as s:
        rows = [EndpointPublic.model_validate(e) for e in webhooks.list_active(s)]
    if json_:
        print_json({"endpoints": [r.model_dump(mode="json") for r in rows]})
        return
    table("Webhook endpoints", ["id", "url", "events", "description", "created"],
          [[r.id, r.url, "all" if r.subscribed_events is None else ", ".join(r.subscribed_events),
            r.description or "", r.created_at] for r in rows])


# -- the log ---------------------------------------------------------------------------------

@app.command("deliveries")
def deliveries(
    tenant: str = tenant_option.option(),
    endpoint: str = typer.Option(None, "--endpoint", help="Only this endpoint's deliveries."),
    status: Status = typer.Option(None, "--status", help="Only deliveries in this status."),
    since: timedelta = since_option("Only deliveries created in this window: 30m, 1h, 24h, 7d."),
    limit: int = typer.Option(50, "--limit", min=1, max=1000, help="At most this many, newest first."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """A tenant's delivery log, newest first."""
    with tenant_option.session(tenant) as (s, now):
        if endpoint:
            webhooks.get(s, endpoint)
        rows = webhooks.delivery_log(s, tenant, endpoint_id=endpoint, status=status.value if status else None,
                                     since=now - since if since else None, limit=limit)
        logged = _public(s, rows)
    listed(json_, "deliveries", logged, "no deliveries match",
           lambda found: _log_table("Deliveries (newest first, times in UTC)", found))


def _public(session: Session, rows: list[Delivery]) -> list[DeliveryPublic]:
    attempts = delivery.attempts_of(session, [d.id for d in rows])
    return [DeliveryPublic.of(d, attempts[d.id]) for d in rows]


def _log_table(title: str, logged: list[DeliveryPublic]) -> None:
    table(title, ["id", "endpoint", "event type", "status", "attempts", "last result", "next attempt", "created"],
          [[d.id, d.endpoint_id or d.url, d.event_type, _status(d.status), len(d.attempts),
            _last_result(d), _short_time(d.next_attempt_at), _short_time(d.created_at)] for d in logged])


def _short_time(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def _status(status: str) -> Text:
    return styled(status, STATUS_COLOURS.get(status, "white"))


def _last_result(d: DeliveryPublic) -> str:
    if not d.attempts:
        return "—"
    last = d.attempts[-1]
    code = "" if last.status_code is None else str(last.status_code)
    if not last.error or last.error == f"HTTP {code}":
        return code
    return f"{code} {last.error}".strip()


# -- one delivery ----------------------------------------------------------------------------

@app.command("show")
def show(
    delivery_id: str = typer.Argument(..., metavar="DELIVERY_ID", help="Delivery id (from `cs webhooks deliveries`)."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """One delivery (of any tenant) and every attempt made."""
    rt = runtime()
    with rt.session() as s:
        row = _find(s, delivery_id)
        [item] = _public(s, [row])
    if json_:
        print_json({"delivery": {**item.model_dump(mode="json"), "tenant_id": row.tenant_id}})
        return
    _render(item, row)


def _find(session: Session, delivery_id: str) -> Delivery:
    try:
        return delivery.get(session, delivery_id)
    except NotFound:
        raise NotFound(f"no delivery with id {delivery_id}") from None


def _render(item: DeliveryPublic, row: Delivery) -> None:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    for label, value in [
        ("status", _status(item.status)), ("event type", item.event_type), ("kind", item.kind),
        ("event id", item.event_id or "—"), ("tenant", row.tenant_id), ("endpoint", item.endpoint_id or "—"),
        ("url", item.url), ("attempts", f"{len(item.attempts)} of {row.max_attempts}"),
        ("next attempt", _when(item.next_attempt_at)), ("created", _when(item.created_at)),
        ("delivered", _when(item.delivered_at)),
    ]:
        facts.add_row(label, cell(value))
    title = f"delivery {item.id}" + ("  [yellow]TEST[/]" if item.test else "")
    out.print(Panel(facts, title=title, title_align="left", expand=False))
    if item.attempts:
        table("Attempts", ["#", "at (UTC)", "status code", "latency", "error", "response"],
              [[a.number, _short_time(a.at), a.status_code, f"{a.latency_ms:.0f} ms", a.error or "",
                _excerpt(a.response_excerpt)] for a in item.attempts])


def _when(value) -> str:
    return value.isoformat(timespec="seconds") if value else "—"


def _excerpt(text: str | None, width: int = 80) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[:width - 1] + "…"


# -- replay ----------------------------------------------------------------------------------

@app.command("replay")
def replay(
    delivery_id: str = typer.Argument(None, metavar="DELIVERY_ID", help="The delivery to send again."),
    failed: bool = typer.Option(False, "--failed", help="Replay every failed delivery of --tenant in --since."),
    tenant: str = tenant_option.option(required=False, help="Tenant id or slug, with --failed (default: CS_TENANT)."),
    since: timedelta = since_option("With --failed: deliveries created in this window (default 24h)."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """Make one new attempt now, of one delivery or of every failed one of a tenant."""
    _check_replay_input(delivery_id, failed, tenant, since)
    if failed:
        _replay_failed(runtime(), tenant, since or DEFAULT_REPLAY_WINDOW, json_)
    else:
        _replay_one(runtime(), delivery_id, json_)


def _check_replay_input(delivery_id: str | None, failed: bool, tenant: str | None,
                        since: timedelta | None) -> None:
    if delivery_id and failed:
        raise Failure("give a DELIVERY_ID or --failed, not both", "usage", exit_code=2)
    if not delivery_id and not failed:
        raise Failure("give a DELIVERY_ID, or --failed --tenant ID [--since 24h]", "usage", exit_code=2)
    if failed and not tenant:
        raise Failure("--failed needs --tenant", "usage", exit_code=2)
    if delivery_id and ((tenant and tenant_option.given_on_command_line()) or since):   # CS_TENANT is only a default
        raise Failure("--tenant and --since go with --failed, not with a DELIVERY_ID", "usage", exit_code=2)


def replay_now(rt: Runtime, delivery_id: str) -> tuple[DeliveryPublic, bool]:
    """The replay flow on a delivery of any tenant: the delivery as it now is, with False
    when a worker claimed that attempt first (it is being sent right now)."""
    with rt.session() as s:
        try:
            done = replay_flow.replay(rt, s, delivery_id)
        except NotFound:
            raise NotFound(f"no delivery with id {delivery_id}") from None
    return done.delivery, done.attempted


def _replay_one(rt: Runtime, delivery_id: str, json_: bool) -> None:
    item, attempted = replay_now(rt, delivery_id)
    if json_:
        print_json({"delivery": item.model_dump(mode="json")})
    elif not attempted:
        out.print(f"delivery {item.id} is being sent by a worker right now; "
                  f"`cs webhooks show {item.id}` gives the result")
    elif item.status == "delivered":
        last = item.attempts[-1]
        success(f"delivery {item.id} delivered on attempt {last.number} "
                f"({last.status_code}, {last.latency_ms:.0f} ms)")
    else:
        number = item.attempts[-1].number if item.attempts else 0
        out.print(f"[bold red]✗[/bold red] delivery {item.id}: attempt {number} failed "
                  f"({escape(_last_result(item) or 'no answer')}); it is now {item.status}", highlight=False)


def _replay_failed(rt: Runtime, tenant_id: str, window: timedelta, json_: bool) -> None:
    now = rt.now()
    with rt.session(tenant_id) as s:
        tenants.get(s, tenant_id, now=now)
        ids = webhooks.failed_since(s, tenant_id, now - window)
    results, skipped = [], []
    with _progress() as progress:
        task = progress.add_task("replaying failed deliveries", total=len(ids))
        for delivery_id in ids:
            try:
                results.append(replay_now(rt, delivery_id)[0])
            except InvalidState as exc:   # not sent again (a deleted endpoint, a rolled-back message): the rest go on
                skipped.append({"id": delivery_id, "error": exc.message})
            progress.advance(task)
    delivered = sum(1 for d in results if d.status == "delivered")
    if json_:
        print_json({"replayed": len(results), "delivered": delivered, "failed": len(results) - delivered,
                    "deliveries": [d.model_dump(mode="json") for d in results], "skipped": skipped})
        return
    _report(results, delivered, now - window)
    for item in skipped:
        out.print(f"[yellow]skipped[/yellow] delivery {escape(item['id'])}: {escape(item['error'])}")


def _progress() -> Progress:
    console = Console(file=sys.stderr, width=None if sys.stderr.isatty() else 100)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console)


def _report(results: list[DeliveryPublic], delivered: int, since) -> None:
    still = [d for d in results if d.status != "delivered"]
    noun = "delivery" if len(results) == 1 else "deliveries"
    success(f"replayed {len(results)} failed {noun} created since {_when(since)}: "
            f"{delivered} delivered, {len(still)} still failing")
    if still:
        _log_table("Still failing (times in UTC)", still)
