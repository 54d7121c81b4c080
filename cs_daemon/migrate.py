"""Alembic, driven from code: `cs db upgrade`, and the embedded daemon at start."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from .config import Settings
from .db import get_engine

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(settings: Settings) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = get_engine(settings)
    cfg.attributes["settings"] = settings      # data migrations that encrypt need CS_SECRET_KEY
    return cfg


def upgrade(settings: Settings, revision: str = "head") -> None:
    command.upgrade(alembic_config(settings), revision)


def pending(settings: Settings) -> bool:
    """True when the database is behind the newest migration."""
    head = ScriptDirectory.from_config(alembic_config(settings)).get_current_head()
    with get_engine(settings).connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    return current != head
