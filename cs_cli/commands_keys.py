from __future__ import annotations

from typing import List

import typer

from cs_daemon.auth import service as keys
from cs_daemon.auth.access import PERMISSIONS
from cs_daemon.errors import NotFound
from cs_daemon.team.models import ROLES
from cs_daemon.tenants import service as tenants

from . import params, tenant_option
from .context import runtime
from .output import print_json, success, table

app = typer.Typer(help="API keys.", no_args_is_help=True)


@app.command("issue")
def issue(
    tenant: str = tenant_option.option(),
    role: str = typer.Option(..., "--role", help="admin, editor or viewer."),
    permission: List[str] = typer.Option(..., "--permission", help=f"Repeatable: {', '.join(PERMISSIONS)}."),
    test: bool = typer.Option(False, "--test", help="A test-mode key (rt_test_)."),
    label: str = typer.Option(None, "--label", help="A name to recognise the key by."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """Issue a key; its secret is printed once and never again."""
    if role not in ROLES:
        raise typer.BadParameter(f"must be one of {', '.join(ROLES)}", param_hint="--role")
    for p in permission:
        if p not in PERMISSIONS:
            raise typer.BadParameter(f"{p!r} is not one of {', '.join(PERMISSIONS)}", param_hint="--permission")
    label = params.text(label, "--label", 200)
    rt = runtime()
    with rt.session(tenant) as s:
        tenants.get(s, tenant, now=rt.now())
        issued = keys.issue(s, tenant, role=role, permissions=permission, now=rt.now(), test=test, label=label)
    result = {"id": issued.key.id, "api_key": issued.secret, "prefix": issued.key.prefix}
    if json_:
        print_json(result)
        return
    success(f"{role} key issued with {', '.join(permission)}; copy the secret now, it is not shown again")
    table("", ["id", "prefix", "api_key"], [[result["id"], result["prefix"], result["api_key"]]])


@app.command("list")
def list_(
    tenant: str = tenant_option.option(),
    all_: bool = typer.Option(False, "--all", help="Include revoked keys."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """List a tenant's keys (never their secrets)."""
    rt = runtime()
    with rt.session(tenant) as s:
        tenants.get(s, tenant, now=rt.now())
        rows = keys.list_keys(s, include_revoked=all_)
    data = [{"id": k.id, "prefix": k.prefix, "label": k.label, "role": k.role,
             "permissions": k.permissions, "test": k.test, "created_by": k.created_by, "created_at": k.created_at,
             "last_used_at": k.last_used_at, "revoked_at": k.revoked_at} for k in rows]
    if json_:
        print_json({"api_keys": data})
        return
    table("API keys", ["id", "prefix", "label", "role", "permissions", "mode", "created by", "last used", "revoked"],
          [[d["id"], d["prefix"], d["label"], d["role"], ",".join(d["permissions"]),
            "test" if d["test"] else "live", d["created_by"], d["last_used_at"], d["revoked_at"]] for d in data])


@app.command("revoke")
def revoke(
    key_id: str = typer.Argument(..., help="Key id (from `cs keys list`)."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """Revoke a key; requests with it get 401 from now on."""
    rt = runtime()
    now = rt.now()
    with rt.session() as s:
        try:
            key = keys.revoke(s, key_id, now=now)
        except NotFound:
            raise NotFound(f"no API key with id {key_id}") from None
    if json_:
        print_json({"id": key.id, "revoked": True, "revoked_at": key.revoked_at})
    elif key.revoked_at < now:
        success(f"key {key.prefix}… was already revoked, at {key.revoked_at.isoformat(timespec='seconds')}")
    else:
        success(f"key {key.prefix}… revoked")
