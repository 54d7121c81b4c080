from __future__ import annotations

import typer

from cs_daemon import doctor as checks

from .context import runtime
from .output import print_json, success, table


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor(json_: bool = typer.Option(False, "--json", help="Print a JSON document.")):
        """List stored configs and playbooks that no longer validate (field and why);
        exit 1 when there is any, 0 when there is none."""
        rt = runtime()
        with rt.session(commit=False) as s:
            report = checks.examine(s)
        if json_:
            print_json(report.as_dict())
        elif report.problems:
            table(f"{len(report.problems)} problems in stored data", ["tenant", "playbook", "field", "message"],
                  [[f"{p.tenant_name} ({p.tenant_id})", f"{p.playbook_name} ({p.playbook_id})" if p.playbook_id else "",
                    p.field, p.message] for p in report.problems])
        else:
            success(f"no problems in {report.tenants} tenants and {report.playbooks} playbooks")
        if report.problems:
            raise typer.Exit(1)
