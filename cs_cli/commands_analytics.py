from __future__ import annotations

import typer
from rich.columns import Columns
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from cs_daemon.analytics import service
from cs_daemon.tenants import service as tenants

from . import tenant_option
from .context import runtime
from .output import cell, out, print_json


def register(app: typer.Typer) -> None:
    @app.command("analytics")
    def analytics(
        view: str = typer.Argument(None, help="uplift: only each playbook's uplift, as a table."),
        tenant: str = tenant_option.option(),
        range_: str = typer.Option("30d", "--range", help="7d, 30d or 90d."),
        json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
    ):
        """KPIs, ROI and distributions of a tenant, as panels and bar charts; `uplift`
        for each playbook's uplift over its holdout (docs/decisions.md)."""
        if range_ not in service.RANGES:
            raise typer.BadParameter("must be 7d, 30d or 90d", param_hint="--range")
        if view not in (None, "uplift"):
            raise typer.BadParameter(f"unknown view {view!r}: uplift, or none", param_hint="VIEW")
        rt = runtime()
        with rt.session(tenant) as s:
            tenants.get(s, tenant, now=rt.now())
            make = service.uplift_report if view == "uplift" else service.report
            report = make(s, range_=range_, now=rt.now())
        if json_:
            print_json(report)
        elif view == "uplift":
            _render_uplift(report)
        else:
            _render(report)


def _pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def _render(r: dict) -> None:
    k, roi = r["kpis"], r["roi"]
    cards = [("users", str(k["total_users"])), ("interventions", str(k["total_interventions"])),
             ("positive outcomes", _pct(k["positive_outcome_rate"])), ("retention", _pct(k["retention_rate"])),
             ("churn", _pct(k["churn_rate"])), ("recovered users", str(roi["recovered_users"])),
             ("delivery success", _pct(roi["intervention_success_rate"])),
             ("days to outcome", "—" if roi["avg_time_to_outcome_days"] is None else f"{roi['avg_time_to_outcome_days']:g}")]
    out.print(f"[bold]Analytics, last {r['range']}[/bold]")
    out.print(Columns([Panel(f"[bold]{v}[/bold]", title=t, expand=False) for t, v in cards]))
    _bars("Lifecycle stages", [(d["stage"], d["count"]) for d in r["lifecycle_distribution"]])
    _bars("Risk levels", [(d["risk_level"], d["count"]) for d in r["risk_distribution"]])
    _bars("Outcomes", [(d["outcome"], d["count"]) for d in r["outcome_stats"]])
    ai = r.get("ai")
    if ai:
        fallbacks = ", ".join(f"{escape(reason)}: {n}" for reason, n in ai["fallbacks_by_reason"].items()) or "none"
        out.print(f"[bold]Decisions[/bold] {ai['decisions']} (the agent made {ai['agent_decisions']}); "
                  f"model tokens {ai['tokens']}; agent fallbacks: {fallbacks}", highlight=False)
    if r["top_playbooks"]:
        t = Table(title="Top playbooks", title_justify="left", header_style="bold")
        for col in ("playbook", "interventions", "success rate"):
            t.add_column(col)
        for p in r["top_playbooks"]:
            t.add_row(cell(p["name"]), str(p["interventions"]), "—" if p["success_rate"] is None else _pct(p["success_rate"]))
        out.print(t)


def _arm(arm: dict) -> str:
    return f"{arm['positive']}/{arm['n']}" + (f" ({_pct(arm['positive'] / arm['n'])})" if arm["n"] else "")


def _points(value: float) -> str:
    return f"{value * 100:+.1f} pts"


def _render_uplift(r: dict) -> None:
    t = Table(title=f"Uplift over the holdout, last {r['range']}", title_justify="left", header_style="bold")
    for col, justify in (("playbook", "left"), ("treated", "right"), ("held out", "right"), ("uplift", "right"),
                         ("95% interval", "right"), ("proven", "center")):
        t.add_column(col, justify=justify)
    for u in r["uplift"]:
        ci = u["uplift_ci"]
        t.add_row(cell(u["name"]), _arm(u["treated"]), _arm(u["held_out"]),
                  "—" if u["uplift"] is None else _points(u["uplift"]),
                  "—" if ci is None else f"{_points(ci[0])} to {_points(ci[1])}",
                  "[green]yes[/]" if u["uplift_significant"] else "no")
    if not r["uplift"]:
        out.print(f"No settled outcomes in the last {r['range']}.")
        return
    out.print(t)


def _bars(title: str, rows: list[tuple[str, int]], width: int = 30) -> None:
    if not rows:
        return
    top = max(n for _, n in rows) or 1
    t = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    t.add_column(justify="right", style="dim")
    t.add_column()
    t.add_column(justify="right")
    for label, n in rows:
        t.add_row(label, "[cyan]" + "█" * max(1 if n else 0, round(n / top * width)) + "[/]", str(n))
    out.print(t)
