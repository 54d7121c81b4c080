from __future__ import annotations

import typer

from cs_daemon.partners import service as partners
from cs_daemon.tenants import service as tenants

from . import tenant_option
from .context import runtime
from .output import print_json, table

app = typer.Typer(help="Partner tenants and the customer tenants they provisioned.", no_args_is_help=True)


@app.command("customers")
def customers(
    tenant: str = tenant_option.option(help="The partner's tenant id or slug (default: CS_TENANT)."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """List the customer tenants a partner provisioned."""
    rt = runtime()
    with rt.session(tenant) as s:
        partner = tenants.get(s, tenant, now=rt.now())
        rows = partners.list_customers(s, tenant)
    data = [{"tenant_id": t.id, "name": t.name, "slug": t.slug, "plan_tier": t.plan_tier,
             "plan_status": t.plan_status, "tracked_users": t.tracked_users, "created_at": t.created_at}
            for t in rows]
    if json_:
        print_json({"partner": partner.partner, "customers": data})
        return
    title = f"Customers of {partner.name}" + ("" if partner.partner else " (not a partner now)")
    table(title, ["tenant_id", "name", "slug", "plan", "status", "tracked users", "created"],
          [[d["tenant_id"], d["name"], d["slug"], d["plan_tier"], d["plan_status"], d["tracked_users"],
            d["created_at"]] for d in data])
