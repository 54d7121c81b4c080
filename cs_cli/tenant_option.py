"""The one `--tenant` of every tenant-scoped command: it takes the tenant's id or its slug
(the one `cs tenant create` prints), defaults to CS_TENANT, and resolves to the id before
the command runs. An unknown tenant is the same one line and exit code everywhere
(UNKNOWN_TENANT_EXIT)."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime
from typing import Iterator

import typer
from sqlalchemy.orm import Session
from typer._click.globals import get_current_context   # typer's own click: its context stack

from cs_daemon import jsontext
from cs_daemon.tenants import service as tenants

from .context import runtime
from .output import Failure

ENV = "CS_TENANT"
UNKNOWN_TENANT_EXIT = 1


def resolve(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    if value is None or ctx.resilient_parsing:
        return value
    value = value.strip()
    found = None
    if value and jsontext.NUL not in value:
        with runtime().session() as s:
            found = tenants.find(s, value)
    if found is None:
        where = " (from CS_TENANT)" if _source(ctx, param.name) == "ENVIRONMENT" else ""
        raise Failure(f"tenant not found: no tenant has the id or slug {value!r}{where}; `cs tenant list` shows them",
                      "not_found", UNKNOWN_TENANT_EXIT)
    return found.id


def option(*, required: bool = True, help: str = "Tenant id or slug (default: CS_TENANT).") -> typer.models.OptionInfo:
    return typer.Option(... if required else None, "--tenant", envvar=ENV, show_envvar=False,
                        callback=resolve, help=help)


def argument(help: str = "Tenant id or slug.") -> typer.models.ArgumentInfo:
    return typer.Argument(..., callback=resolve, help=help)


@contextmanager
def session(tenant: str) -> Iterator[tuple[Session, datetime]]:
    """A session of the (resolved) tenant, its record read first (an expired shadow mode is
    switched off on the way, as everywhere it is read), and the time the command runs at."""
    rt = runtime()
    now = rt.now()
    with rt.session(tenant) as s:
        tenants.get(s, tenant, now=now)
        yield s, now


def given_on_command_line(name: str = "tenant") -> bool:
    """Whether --tenant was typed, not taken from CS_TENANT."""
    ctx = get_current_context(silent=True)
    return ctx is not None and _source(ctx, name) == "COMMANDLINE"


def _source(ctx, name: str) -> str | None:
    source = ctx.get_parameter_source(name)
    return None if source is None else source.name
