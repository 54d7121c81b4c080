from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cs_daemon.connectors.backfill import BATCH, Backfill, Summary
from cs_daemon.runtime import Runtime
from cs_daemon.tenants import service as tenants

from . import tenant_option
from .context import runtime
from .output import Failure, print_json, success, table

app = typer.Typer(help="Events.", no_args_is_help=True)


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
