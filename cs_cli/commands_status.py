"""`cs status`: what is stuck, for the engineer on call (docs/operations.md, "cs status")."""

from __future__ import annotations

from datetime import timedelta

import typer
from rich.markup import escape

from cs_daemon import status as checks

from .context import runtime
from .output import out, print_json, styled, table


def register(app: typer.Typer) -> None:
    @app.command("status")
    def status(
        overdue_after: int = typer.Option(300, "--overdue-after", min=0, max=315_360_000, metavar="SECONDS",
                                          help="A delivery due longer ago than this and still open is stuck."),
        queue_age: int = typer.Option(300, "--queue-age", min=0, max=315_360_000, metavar="SECONDS",
                                      help="A job waiting longer than this is stuck."),
        json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
    ):
        """Heartbeats per process kind, job queues, deliveries due/overdue/failed by channel
        and endpoint, the sweeps' last runs and failures, open in-app streams, and a
        one-line verdict; exit 1 when something is stuck, 0 when nothing is."""
        rt = runtime()
        found = checks.report(rt, checks.Limits(timedelta(seconds=overdue_after), timedelta(seconds=queue_age)))
        if json_:
            print_json(found.as_dict())
        else:
            _render(found)
        if found.verdict != "ok":
            raise typer.Exit(1)


def _render(r: checks.Report) -> None:
    rows = [[kind, p["host"], p["pid"], f"{p['last_beat_seconds_ago']:.0f} s ago", "yes" if p["alive"] else styled("no", "red")]
            for kind, procs in r.processes.items() for p in procs]
    table("Processes (heartbeats)", ["kind", "host", "pid", "last beat", "alive"], rows)
    table("Job queues", ["queue", "ready", "delayed", "oldest waiting"],
          [[q["queue"], q["ready"], q["delayed"], "" if q["oldest_age_seconds"] is None else f"{q['oldest_age_seconds']:.0f} s"]
           for q in r.queues])
    if r.deliveries:
        table("Deliveries", ["channel", "endpoint", "due", "overdue", "failed (1 h)", "oldest due"],
              [[d["channel"], d["endpoint"], d["due"], d["overdue"], d["failed_last_hour"], d["oldest_due_at"]]
               for d in r.deliveries])
    if r.sweeps["runs"]:
        table("Sweeps", ["sweep", "last run", "took", "tenants", "failed"],
              [[s["sweep"], f"{s['age_seconds']:.0f} s ago", f"{s['seconds']:.2f} s", s["tenants"], s["failed"]]
               for s in r.sweeps["runs"]])
    out.print(f"open in-app streams: {r.streams_open}", highlight=False)
    for f in r.findings:
        out.print(("[red]stuck[/]: " if f.stuck else "[yellow]warning[/]: ") + escape(f.message), highlight=False)
    colour = "red" if r.verdict != "ok" else "green"
    out.print(f"[bold {colour}]{escape(r.summary)}[/]", highlight=False)
