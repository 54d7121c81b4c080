from __future__ import annotations

from enum import Enum

import typer

from cs_daemon.tenants import service as tenants

from . import tenant_option
from .context import runtime
from .output import print_json, success


class OnOff(str, Enum):
    on = "on"
    off = "off"


def register(app: typer.Typer) -> None:
    @app.command("kill-switch")
    def kill_switch(
        state: OnOff = typer.Argument(..., help="on: nothing leaves the service; off: resume."),
        tenant: str = tenant_option.option(),
        json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
    ):
        """Turn a tenant's kill switch on or off."""
        rt = runtime()
        with rt.session(tenant) as s:
            t = tenants.set_kill_switch(s, tenant, state is OnOff.on, now=rt.now())
        if json_:
            print_json({"tenant_id": t.id, "kill_switch_active": t.kill_switch_active})
        else:
            success(f"kill switch {state.value} for {t.name}")

    @app.command("shadow-mode")
    def shadow_mode(
        state: OnOff = typer.Argument(..., help="on: record decisions, deliver nothing (72 h)."),
        tenant: str = tenant_option.option(),
        json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
    ):
        """Turn a tenant's shadow mode on (for 72 hours) or off."""
        rt = runtime()
        with rt.session(tenant) as s:
            t = tenants.set_shadow_mode(s, tenant, state is OnOff.on, now=rt.now())
        expires = t.config.get("shadow_mode_expires_at")
        if json_:
            print_json({"tenant_id": t.id, "shadow_mode": t.shadow_mode, "shadow_mode_expires_at": expires})
        else:
            success(f"shadow mode {state.value} for {t.name}" + (f" until {expires}" if expires else ""))
