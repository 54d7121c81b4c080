"""The SQL a runtime runs, seen on both of its engines: the transactional one and the one
whose connections stay in autocommit (cs_daemon/db.py; `atomic=False` units and GETs)."""

from __future__ import annotations

from typing import Callable

from sqlalchemy import event
from sqlalchemy.engine import Engine

from cs_daemon import db
from cs_daemon.config import Settings


def engines(settings: Settings) -> list[Engine]:
    return [db.get_engine(settings), db.autocommit_engine(settings)]


class Watching:
    """`note(conn, cursor, statement, *args)` called before each statement of either
    engine while open."""

    def __init__(self, settings: Settings, note: Callable[..., None]):
        self.engines, self.note = engines(settings), note

    def __enter__(self):
        for engine in self.engines:
            event.listen(engine, "before_cursor_execute", self.note)
        return self

    def __exit__(self, *exc):
        for engine in self.engines:
            event.remove(engine, "before_cursor_execute", self.note)


class Statements(Watching):
    """The statements run while open, in order."""

    def __init__(self, settings: Settings):
        self.seen: list[str] = []
        super().__init__(settings, lambda _conn, _cursor, statement, *_args: self.seen.append(statement))
