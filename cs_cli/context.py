"""Build what a command needs from the environment."""

from __future__ import annotations

from typer._click.globals import get_current_context   # typer's own click: its context stack

from cs_daemon import migrate
from cs_daemon.config import Settings, load_settings
from cs_daemon.runtime import Runtime
from cs_daemon.wiring import bootstrap

from cs_daemon.logs import setup_logging
from .output import Failure


def runtime(*, migrate_embedded: bool = True) -> Runtime:
    """The runtime for a command, made once per command (an option resolving the tenant
    and the command share it). The embedded SQLite database is brought up to date on
    the way; a production database must have been upgraded with `cs db upgrade`."""
    ctx = get_current_context(silent=True)
    memo = ctx.find_root().meta if ctx is not None and migrate_embedded else {}
    if "cs.runtime" not in memo:
        settings = _loaded() or load_settings()
        setup_logging(settings.cs_log_level, settings.cs_log_format)
        if settings.is_sqlite and migrate_embedded:
            migrate.upgrade(settings)
        memo["cs.runtime"] = bootstrap(settings)
    return memo["cs.runtime"]


def _loaded() -> Settings | None:
    """The settings `cs` checked before running this command (cs_cli/main.py)."""
    ctx = get_current_context(silent=True)
    return ctx.obj if ctx is not None and isinstance(ctx.obj, Settings) else None


def require_current_schema(rt: Runtime) -> None:
    try:
        behind = migrate.pending(rt.settings)
    except Exception as exc:
        raise Failure(f"database not reachable: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    if behind:
        raise Failure("the database schema is not current: run `cs db upgrade` first")
