from __future__ import annotations

import typer

from cs_daemon import plans
from cs_daemon.tenants import service as tenants

from . import params, tenant_option
from .commands_flags import OnOff, switch
from .context import runtime
from .output import out, print_json, success, table

app = typer.Typer(help="Tenants.", no_args_is_help=True)


@app.command("create")
def create(
    name: str = typer.Argument(..., help="Tenant (company) name."),
    owner_email: str = typer.Option(..., "--owner-email", help="Email of the first admin."),
    owner_name: str | None = typer.Option(None, "--owner-name", help="Name of the first admin (1 to 200 characters)."),
    plan: str = typer.Option("trial", "--plan", help="trial, starter, growth or scale."),
    partner: bool = typer.Option(False, "--partner", help="Make it a partner tenant."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """Create a tenant with its first admin member and an admin `full` key (shown once)."""
    if plan not in plans.TIERS:
        raise typer.BadParameter(f"must be one of {', '.join(plans.TIERS)}", param_hint="--plan")
    owner_email = params.email(owner_email, "--owner-email")
    owner_name = params.text(owner_name, "--owner-name", 200)
    name = params.text(name, "NAME", 200)
    rt = runtime()
    with rt.session() as s:
        made = tenants.create(s, name=name, owner_email=owner_email, owner_name=owner_name,
                              now=rt.now(),
                              plan_tier=plan, partner=partner)
    result = {"tenant_id": made.tenant.id, "slug": made.tenant.slug, "api_key": made.key.secret,
              "member_id": made.owner.id}
    if json_:
        print_json(result)
        return
    success(f"tenant {made.tenant.name} ({made.tenant.slug}) created on plan {plan}")
    table("", ["tenant_id", "member_id", "api_key (shown once)"],
          [[result["tenant_id"], result["member_id"], result["api_key"]]])
    if partner:
        out.print(f"the partner API needs a key with permission partner: cs keys issue --tenant {made.tenant.id} "
                  "--role admin --permission partner", highlight=False)


@app.command("list")
def list_(json_: bool = typer.Option(False, "--json", help="Print a JSON document.")):
    """List tenants."""
    rt = runtime()
    with rt.session() as s:
        rows = tenants.list_all(s)
    data = [{"id": t.id, "name": t.name, "slug": t.slug, "plan_tier": t.plan_tier,
             "plan_status": t.plan_status, "kill_switch_active": t.kill_switch_active,
             "shadow_mode": t.shadow_mode, "partner": t.partner, "created_at": t.created_at}
            for t in rows]
    if json_:
        print_json({"tenants": data})
        return
    table("Tenants", ["id", "slug", "name", "plan", "status", "kill switch", "shadow", "created"],
          [[d["id"], d["slug"], d["name"], d["plan_tier"], d["plan_status"], "on" if d["kill_switch_active"] else "off",
            "on" if d["shadow_mode"] else "off", d["created_at"]] for d in data])


@app.command("set-partner")
def set_partner(
    tenant_id: str = tenant_option.argument(),
    state: OnOff = typer.Argument(..., help="on: the tenant may use the partner API; off: it may not."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """Make a tenant a partner (on) or not (off); its partner keys follow at once."""
    switch(tenant_id, state, json_, tenants.set_partner, "partner", lambda t: ({"partner": t.partner}, ""))
