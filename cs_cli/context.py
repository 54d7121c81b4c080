"""Build what a command needs from the environment."""

from __future__ import annotations

from cs_daemon import migrate
from cs_daemon.config import load_settings
from cs_daemon.runtime import Runtime

from cs_daemon.logs import setup_logging
from .output import Failure


def runtime(*, migrate_embedded: bool = True) -> Runtime:
    """The runtime for a command. The embedded SQLite database is brought up to date on
    the way; a production database must have been upgraded with `cs db upgrade`."""
    settings = load_settings()
    setup_logging(settings.cs_log_level)
    if settings.is_sqlite and migrate_embedded:
        migrate.upgrade(settings)
    return Runtime(settings)


def require_current_schema(rt: Runtime) -> None:
    try:
        behind = migrate.pending(rt.settings)
    except Exception as exc:
        raise Failure(f"database not reachable: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    if behind:
        raise Failure("the database schema is not current: run `cs db upgrade` first")
