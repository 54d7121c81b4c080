"""`cs events`: backfill events from a file through the ingest path, and read the event
log, the events the service recorded (docs/architecture.md, "The event log")."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cs_daemon.connectors.backfill import BATCH, Backfill, Summary
from cs_daemon.outbox import service as event_log
from cs_daemon.runtime import Runtime
from cs_daemon.tenants import service as tenants

from . import tenant_option
from .commands_webhooks import parse_since
from .context import runtime
from .output import Failure, out, print_json, success, table

app = typer.Typer(help="Events: import a backfill, read the event log.", no_args_is_help=True)

TYPE_CHARS = 100            # outbox_events.event_type
USER_CHARS = 255
PAYLOAD_SHOWN = 120         # characters of the payload the table shows


class Format(str, Enum):
    jsonl = "jsonl"
    segment = "segment"
    mixpanel = "mixpanel"
    amplitude = "amplitude"


@app.command("import")
def import_(
    file: Path = typer.Argument(..., help="The file to import: one record a line."),
    tenant: str = tenant_option.option(),
    format_: Format = typer.Option(
        Format.jsonl, "--format",
        help="jsonl: one /api/track event a line; segment, mixpanel, amplitude: one platform record a line."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """Backfill events from a file through the ingest path, in batches of up to 100.
    Bad lines are reported with their number and reason and do not stop the import."""
    _check_file(file)
    rt = runtime()
    with rt.session(tenant) as s:
        tenants.get(s, tenant, now=rt.now())
    summary = _import(rt, tenant, file, format_.value)
    if json_:
        print_json(summary.as_json())
    else:
        _report(file, summary)


def _check_file(file: Path) -> None:
    if not file.exists():
        raise Failure(f"no such file: {file}", "not_found")
    if not file.is_file():
        raise Failure(f"not a file: {file}", "validation_failed")


def _import(rt: Runtime, tenant_id: str, file: Path, fmt: str) -> Summary:
    backfill = Backfill(rt, tenant_id, fmt)
    with _progress() as progress, file.open("rb") as lines:
        task = progress.add_task(f"importing {file.name}", total=_count_lines(file))
        for number, raw in enumerate(lines, start=1):
            backfill.add_line(number, raw)
            progress.advance(task)
        return backfill.finish()


def _progress() -> Progress:
    console = Console(file=sys.stderr, width=None if sys.stderr.isatty() else 100)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("lines"), TimeElapsedColumn(), console=console)


def _count_lines(file: Path) -> int:
    with file.open("rb") as f:
        return sum(1 for _ in f)


def _report(file: Path, summary: Summary) -> None:
    success(f"imported {file.name} in batches of up to {BATCH}: {summary.accepted} accepted, "
            f"{summary.duplicates} duplicates, {summary.over_limit} over the tracked-user limit, "
            f"{len(summary.rejected)} lines rejected")
    if summary.rejected:
        table("Rejected lines", ["line", "error"], [[r.line, r.error] for r in summary.rejected])


# -- the event log -----------------------------------------------------------------------------

@app.command("log")
def log_(
    tenant: str = tenant_option.option(),
    type_: str = typer.Option(None, "--type", metavar="TYPE",
                              help="Only events of this type; a trailing * matches a prefix (custom.*)."),
    user: str = typer.Option(None, "--user", metavar="USER_ID", help="Only events about this user."),
    since: timedelta = typer.Option(None, "--since", parser=parse_since, metavar="DURATION",
                                    help="Only events recorded in this window: 30m, 1h, 24h, 7d."),
    limit: int = typer.Option(event_log.DEFAULT_LIMIT, "--limit", min=1, max=event_log.MAX_LIMIT,
                              help="At most this many, newest first."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """The events the service recorded for a tenant, newest first.

    Webhook event types, whether or not an endpoint was subscribed; kept for
    config.event_log_retention_days (default 30)."""
    _check_filters(type_, user)
    rt = runtime()
    now = rt.now()
    with rt.session(tenant) as s:
        tenants.get(s, tenant, now=now)
        rows = [event_log.public(r) for r in event_log.listing(
            s, event_type=type_, user_id=user, since=now - since if since else None, limit=limit)]
    if json_:
        print_json({"events": rows})
    elif not rows:
        out.print("[dim]no events match[/dim]")
    else:
        table("Event log (newest first, times in UTC)", ["id", "type", "user", "test", "recorded", "payload"],
              [[r["id"], escape(r["event_type"]), escape(str(r["user_id"] or "")), "yes" if r["test"] else "",
                r["created_at"].strftime("%Y-%m-%d %H:%M:%S"), escape(_short(r["payload"]))] for r in rows])


def _check_filters(type_: str | None, user: str | None) -> None:
    if type_ is not None and (not type_.strip() or len(type_) > TYPE_CHARS or "*" in type_[:-1]):
        raise Failure(f"--type: {type_!r} is not an event type (up to {TYPE_CHARS} characters; "
                      "a trailing * matches a prefix, as in custom.*)", "usage", exit_code=2)
    if user is not None and (not user.strip() or len(user) > USER_CHARS):
        raise Failure(f"--user: a user id has 1 to {USER_CHARS} characters", "usage", exit_code=2)


def _short(payload) -> str:
    text = json.dumps(payload, separators=(",", ":"), default=str)
    return text if len(text) <= PAYLOAD_SHOWN else text[:PAYLOAD_SHOWN - 1] + "…"
