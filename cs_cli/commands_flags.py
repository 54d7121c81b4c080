"""`cs kill-switch` and `cs shadow-mode`: a tenant's switches, on or off. `switch` turns any
of a tenant's switches (also `cs tenant set-partner`) and says so."""

from __future__ import annotations

from enum import Enum
from typing import Callable

import typer

from cs_daemon.tenants import service as tenants
from cs_daemon.tenants.models import Tenant

from . import tenant_option
from .context import runtime
from .output import print_json, success


class OnOff(str, Enum):
    on = "on"
    off = "off"


def switch(tenant: str, state: OnOff, json_: bool, setter: Callable[..., Tenant], label: str,
           shown: Callable[[Tenant], tuple[dict, str]]) -> None:
    """`setter(session, tenant, on, now=…)`, then what `shown(tenant)` gives: the fields of
    the JSON document after `tenant_id`, and what the line says after "<label> on for <name>"."""
    rt = runtime()
    with rt.session(tenant) as s:
        t = setter(s, tenant, state is OnOff.on, now=rt.now())
    fields, note = shown(t)
    if json_:
        print_json({"tenant_id": t.id, **fields})
    else:
        success(f"{label} {state.value} for {t.name}{note}")


def _shadow_mode(t: Tenant) -> tuple[dict, str]:
    expires = t.config.get("shadow_mode_expires_at")
    return ({"shadow_mode": t.shadow_mode, "shadow_mode_expires_at": expires},
            f" until {expires}" if expires else "")


# (command, help of STATE, the command's help, setter, label, what it shows)
SWITCHES = [
    ("kill-switch", "on: nothing leaves the service; off: resume.", "Turn a tenant's kill switch on or off.",
     tenants.set_kill_switch, "kill switch", lambda t: ({"kill_switch_active": t.kill_switch_active}, "")),
    ("shadow-mode", "on: record decisions, deliver nothing (72 h).", "Turn a tenant's shadow mode on (for 72 hours) or off.",
     tenants.set_shadow_mode, "shadow mode", _shadow_mode),
]


def register(app: typer.Typer) -> None:
    for name, state_help, doc, setter, label, shown in SWITCHES:
        _register_switch(app, name, state_help, doc, setter, label, shown)


def _register_switch(app: typer.Typer, name: str, state_help: str, doc: str, setter, label: str, shown) -> None:
    def command(
        state: OnOff = typer.Argument(..., help=state_help),
        tenant: str = tenant_option.option(),
        json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
    ):
        switch(tenant, state, json_, setter, label, shown)

    command.__doc__ = doc
    app.command(name)(command)
