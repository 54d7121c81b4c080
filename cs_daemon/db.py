"""Engine, sessions and the tenant scope.

One transaction per request, command or job message: `session_scope()` commits on
success and rolls back on error, and runs the after-commit handlers of the domain events
published in it (cs_daemon/domain_events.py) and the callbacks of `on_commit_each` only
after the commit (so an enqueued job never sees uncommitted rows); one that fails is
logged, never raised, as the commit stands (`_after_commit`). `locked` reads a row to
change it, held from concurrent writers until commit, on both databases.

Tenant isolation is by construction: a session opened with `tenant_id` adds
`tenant_id = :tenant` to every ORM query on a `TenantOwned` table and stamps new rows
with it, so a service cannot forget the filter.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import uuid
from functools import lru_cache
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Callable, Iterator
from weakref import WeakKeyDictionary

import pydantic_core
from sqlalchemy import JSON, Column, DateTime, String, bindparam, event, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.orm import Session, with_loader_criteria
from sqlalchemy.sql.util import find_tables
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel, create_engine

from . import logs
from .config import Settings
from .uow import begin as begin_unit_of_work
from .uow import uow_of

log = logging.getLogger(__name__)


def new_id() -> str:
    return str(uuid.uuid4())


# byte -> the byte with its high nibble set as a version 4 UUID's byte 6 has it, and as
# the RFC 4122 variant's byte 8 has its two high bits
_VERSION_4 = bytes(b & 0x0F | 0x40 for b in range(256))
_VARIANT = bytes(b & 0x3F | 0x80 for b in range(256))


def new_ids(n: int) -> list[str]:
    """n random (version 4) UUIDs as new_id gives them, from one read of the system's
    randomness: the version and variant bits of all set by two translations of the bytes
    at their positions (every 16th from 6 and from 8), all made hex in one call, and each
    id joined from eight 2-byte groups of that hex: under a fifth of the time of n calls
    of new_id (a batch of ingest names 100)."""
    raw = bytearray(os.urandom(16 * n))
    raw[6::16] = raw[6::16].translate(_VERSION_4)
    raw[8::16] = raw[8::16].translate(_VARIANT)
    groups = iter(raw.hex("-", 2).split("-"))   # [""] for n = 0: no id
    return [f"{a}{b}-{c}-{d}-{e}-{f}{g}{h}" for a, b, c, d, e, f, g, h in zip(*[groups] * 8)]


class UTCDateTime(TypeDecorator):
    """Aware UTC datetimes on both databases (SQLite keeps no time zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime")
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value, dialect):
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


def id_field(**kw):
    return Field(default_factory=new_id, primary_key=True, max_length=36, **kw)


def time_field(nullable: bool = True, **kw):
    return Field(default=None, sa_column=Column(UTCDateTime(), nullable=nullable, **kw))


def json_field(default=None, nullable: bool = True):
    factory = (lambda: type(default)()) if default is not None else (lambda: None)
    return Field(default_factory=factory, sa_column=Column(JSON, nullable=nullable))


class TenantOwned(SQLModel):
    """Mixin of every tenant-owned table."""

    tenant_id: str = Field(foreign_key="tenants.id", index=True, max_length=36)


# --- engines ---------------------------------------------------------------------

_engines: dict[object, Engine] = {}   # by URL, and ("autocommit", URL)
_lock = threading.Lock()


def get_engine(settings: Settings) -> Engine:
    url = settings.db_url
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _make_engine(settings)
            _engines[url] = engine
        return engine


def autocommit_engine(settings: Settings) -> Engine:
    """An engine of its own whose connections stay in autocommit. Switching a pooled
    connection in and out of autocommit at each checkout cost about 150 µs of CPU a unit
    of work (docs/deploy.md, "Database connections")."""
    key = ("autocommit", settings.db_url)
    engine = _engines.get(key)
    if engine is None:
        with _lock:
            engine = _engines.get(key)
            if engine is None:
                engine = _engines[key] = _make_engine(settings, isolation_level="AUTOCOMMIT")
                engine.update_execution_options(**{_AUTOCOMMIT: True})
    return engine


def autocommit_connection(settings: Settings) -> Connection:
    """A connection of the autocommit engine (a context manager: given back on exit)."""
    return autocommit_engine(settings).connect()


_AUTOCOMMIT = "cs_autocommit"   # an execution option that only marks the autocommit engine's connections


def in_autocommit(conn) -> bool:
    """Whether this connection runs each statement in a transaction of its own."""
    return bool(conn.get_execution_options().get(_AUTOCOMMIT))


def dispose_engines() -> None:
    with _lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


def _make_engine(settings: Settings, **options) -> Engine:
    if settings.is_sqlite:
        settings.ensure_data_dir()
        engine = create_engine(
            settings.db_url, connect_args={"check_same_thread": False, "timeout": 30}, **options
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    engine = create_engine(
        settings.db_url,
        # no pre-ping (a round trip per checkout): `_closed_by_server` looks at the socket
        # instead, and recycling retires idle ones
        pool_recycle=300,
        pool_size=max(10, settings.cs_worker_threads + 2),   # a worker thread never waits for a connection
        max_overflow=10,
        pool_timeout=5,
        # bound waits on a database that stops answering without refusing (keepalives,
        # and libpq's tcp_user_timeout for unacknowledged writes)
        connect_args={"connect_timeout": 3, "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
                      "keepalives_count": 2, "tcp_user_timeout": 9000},
        # JSON columns read back with pydantic-core's parser, 3x the standard library's:
        # ingest reads every user's state and traits a batch
        json_deserializer=pydantic_core.from_json,
        **options,
    )
    event.listen(engine, "connect", _utc_session)
    event.listen(engine, "checkout", _closed_by_server)
    return engine


def _utc_session(dbapi_conn, _record) -> None:
    """Every new connection's session runs in UTC (docs/deploy.md, "Database
    connections"): times come back in UTC whatever the server's default zone, and
    psycopg reads them with its own UTC zone instead of converting each one (half the
    time a timestamp; ingest reads two a user). A SET, not a startup option, which a
    pooler such as PgBouncer refuses; one round trip a connection."""
    dbapi_conn.execute("SET TIME ZONE 'UTC'")
    dbapi_conn.commit()


def _closed_by_server(dbapi_conn, _record, _proxy) -> None:
    """Refuse a pooled connection the server has closed, without a round trip. An idle
    connection has nothing to read; once the server ends it (a restart, a crash, an
    administrator) its socket is readable: the termination notice, or the end of the
    stream. Handed out, it would fail the first statement of a request after every
    database restart (a 500); refused here, the pool opens a fresh one instead."""
    try:
        fd = dbapi_conn.pgconn.socket
    except Exception:   # already closed or broken: the pool replaces it
        raise DisconnectionError("connection closed") from None
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    if poller.poll(0):
        raise DisconnectionError("the server closed this connection")


def unreachable(exc: BaseException) -> bool:
    """Whether a database error means the server cannot be reached for now (refused,
    closed, shutting down or starting up), as opposed to a fault of the statement."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    if getattr(exc.orig, "sqlite_errorname", None) == "SQLITE_ERROR":
        return False    # SQLite's word for a fault of the statement (too many variables, no such table)
    state = getattr(exc.orig, "sqlstate", None)
    if isinstance(exc, OperationalError) and state is None:
        return True     # no answer from a server at all: the connection failed
    # 08: connection exception; 57P01-57P03: shutdown by an administrator, crash, starting up
    return bool(state) and (state.startswith("08") or state in ("57P01", "57P02", "57P03"))


# --- sessions ---------------------------------------------------------------------


class UnitSession(Session):
    """The session of a unit of work. `get` first lets the tenant the key memo gave the
    unit of work join the identity map (uow.UnitOfWork.tenant), so a read of the
    tenant's row finds it there without a query, as one authentication loaded."""

    def get(self, *args, **kwargs):
        uow_of(self).tenant
        return super().get(*args, **kwargs)


@contextmanager
def session_scope(
    settings: Settings, *, tenant_id: str | None = None, commit: bool = True, atomic: bool = True
) -> Iterator[Session]:
    """A unit of work. With `tenant_id`, every query is limited to that tenant, and the
    log lines written meanwhile name it (cs_daemon/logs.py).
    `atomic=False` runs each statement in its own transaction: no BEGIN and COMMIT round
    trips, for reads whose writes (if any) stand alone, like a key's last-used stamp."""
    if tenant_id is None:
        with _session_scope(settings, tenant_id, commit, atomic) as session:
            yield session
        return
    with logs.bind(tenant_id=tenant_id), _session_scope(settings, tenant_id, commit, atomic) as session:
        yield session


@contextmanager
def _session_scope(settings: Settings, tenant_id: str | None, commit: bool, atomic: bool) -> Iterator[Session]:
    engine = get_engine(settings) if atomic else autocommit_engine(settings)
    session = UnitSession(engine, expire_on_commit=False)
    uow = begin_unit_of_work(session, tenant_id, settings)
    try:
        yield session
        if not atomic and not (session.new or session.dirty or session.deleted):
            pass   # each statement committed itself: nothing is left to flush or commit
        elif commit:
            session.commit()
        else:
            session.rollback()
    except BaseException:
        session.rollback()
        raise
    finally:
        callbacks = uow.committed() if commit else []
        session.close()
    for fn, args in callbacks:
        _after_commit(fn, args)


def _after_commit(fn: Callable, args: tuple) -> None:
    """Run one after-commit callback. Its work is already durable (a delivery, a decision
    request, an in-app message is a row first): a callback only hurries it along, e.g. by
    enqueueing a job. So a failure here (Redis unreachable) cannot undo the committed
    write and must not be reported as its failure: it is logged, naming what waits, and
    the periodic sweeps pick the rows up (docs/deploy.md, "When Redis is unreachable")."""
    try:
        fn(*args)
    except Exception as exc:
        what = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}{_short(args)}"
        log.warning("after commit, %s was not done (%s: %s); the committed rows wait for the periodic sweep",
                    what, type(exc).__name__, exc)


def _short(args: tuple, width: int = 300) -> str:
    # the settings an after-commit handler is given say nothing of what waits (and hold
    # the database URL): left out
    args = tuple(a for a in args if not isinstance(a, Settings))
    text = repr(args) if len(args) != 1 else f"({args[0]!r})"
    return text if len(text) <= width else text[:width - 1] + "…)"


def locked(session: Session, model: type, key):
    """The row of `model` with primary key `key` (None when there is none), read to be
    changed and held from concurrent writers until this transaction ends: a state check
    made on it stays true until commit. PostgreSQL locks the row (SELECT … FOR UPDATE,
    which waits for a writer holding it and then reads its committed version). SQLite has
    no row locks: the transaction takes the database's write lock first, since its
    driver would begin the transaction only at the first write, after the read.
    Transactions that lock several kinds of rows take the subject (an intervention,
    an action) before the rows that follow it (its deliveries, its in-app message)."""
    write_lock(session)
    return session.get(model, key, with_for_update=True, populate_existing=True)


def write_lock(session: Session) -> None:
    """On SQLite, begin this session's transaction now with the write lock (BEGIN
    IMMEDIATE), so what it reads next cannot change before it commits; a transaction
    already writing has it. A no-op on PostgreSQL, which locks rows instead."""
    conn = session.connection()
    if conn.dialect.name != "sqlite":
        return
    if in_autocommit(conn):
        return
    if not conn.connection.dbapi_connection.in_transaction:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def room_for_segments(session: Session) -> None:
    """Give this transaction's queries over a whole segment (a condition tree counted or
    swept across every customer) `CS_SEGMENT_WORK_MEM_MB` of PostgreSQL work_mem. An
    event clause under `any` stays a correlated subquery, which PostgreSQL runs either
    as one index probe per customer or, when the matching users' ids fit in memory, as
    one scan of the events into a hash table: the default 4 MB picks the probes, several
    times slower on a large tenant. Past the memory the planner keeps the probes, so a
    bigger tenant is slower, never wrong. A no-op on SQLite and in autocommit sessions."""
    if session.get_bind().dialect.name != "postgresql":
        return
    if in_autocommit(session.connection()):
        return
    megabytes = uow_of(session).settings.cs_segment_work_mem_mb
    session.execute(text(f"SET LOCAL work_mem = '{int(megabytes)}MB'"))


def on_commit_each(session: Session, fn: Callable[[list], None], item) -> None:
    """Collect `item` for `fn`: once the transaction has committed, `fn(items)` runs once
    with every item collected in it (so work made row by row is sent in batches)."""
    uow_of(session).collect(fn, item)


@event.listens_for(Session, "after_rollback")
def _forget_callbacks(session: Session) -> None:
    uow_of(session).forget()


@event.listens_for(Session, "after_commit")
def _events_told(session: Session) -> None:
    # the unit of work lists the domain events of the transaction under way: a session
    # that commits many times (a sweep) keeps none of the committed ones
    uow_of(session).events = []


@event.listens_for(Session, "do_orm_execute")
def _scope_to_tenant(state) -> None:
    tenant_id = uow_of(state.session).tenant_id
    if tenant_id is None or state.is_column_load or state.is_relationship_load:
        return
    if state.is_select or state.is_update or state.is_delete:
        statement = state.statement
        if state.is_select and statement._propagate_attrs.get("compile_state_plugin") != "orm":
            # a select SQLAlchemy does not treat as an ORM query (plain table columns, or only
            # aggregates) ignores loader criteria: filter its tenant-owned tables directly
            statement = _scoped_core_select(statement)
            if statement is not state.statement:
                state.parameters = {**(state.parameters or {}), _TENANT_PARAM: tenant_id}
        else:
            statement = statement.options(*_criteria(tenant_id, len(_tenant_owned_models())))
        state.statement = statement


@lru_cache(maxsize=1024)
def _criteria(tenant_id: str, _models: int) -> tuple:
    """The loader criteria of one tenant, built once (they are costly to build per query)."""
    return tuple(with_loader_criteria(model, lambda cls: cls.tenant_id == tenant_id, include_aliases=True)
                 for model in _tenant_owned_models())


_TENANT_PARAM = "tenant_scope_id"
_core_scoped: WeakKeyDictionary = WeakKeyDictionary()


def _scoped_core_select(statement):
    """The select with `tenant_id = :tenant_scope_id` on each tenant-owned table it reads;
    remembered per statement object, so a statement built once is scoped once."""
    scoped = _core_scoped.get(statement)
    if scoped is None:
        scoped = statement
        for table in _tenant_tables(statement):
            scoped = scoped.where(table.c.tenant_id == bindparam(_TENANT_PARAM))
        # the value must not refer to its own key, or the entry would never be dropped
        _core_scoped[statement] = scoped if scoped is not statement else _UNSCOPED
    return statement if scoped is _UNSCOPED else scoped


_UNSCOPED = object()


def _tenant_tables(statement) -> list:
    """The tenant-owned tables in the statement's own FROM list: explicit froms, the
    columns' tables and the WHERE clause's tables, as SQL would put them in FROM.
    (Select.get_final_froms gives the same list but builds a compile state, 0.5 ms.)"""
    owned = {model.__table__ for model in _tenant_owned_models()}
    froms = [*statement._from_obj, *statement.columns_clause_froms]
    for criterion in statement._where_criteria:
        froms.extend(criterion._from_objects)
    found = []
    for from_ in froms:
        for table in find_tables(from_, include_joins=True):
            if table in owned and table not in found:
                found.append(table)
    return found


_owned_cache: tuple[int, list[type]] = (0, [])


def _tenant_owned_models() -> list[type]:
    """Every mapped table class with a tenant_id (the mixin itself is not mapped)."""
    global _owned_cache
    mappers = SQLModel._sa_registry.mappers
    if _owned_cache[0] != len(mappers):
        _owned_cache = (len(mappers), [m.class_ for m in mappers if issubclass(m.class_, TenantOwned)])
    return _owned_cache[1]


@event.listens_for(Session, "before_flush")
def _stamp_tenant(session: Session, _ctx, _instances) -> None:
    tenant_id = uow_of(session).tenant_id
    if tenant_id is None:
        return
    for obj in session.new | session.dirty:
        if isinstance(obj, TenantOwned):
            if obj.tenant_id is None:
                obj.tenant_id = tenant_id
            elif obj.tenant_id != tenant_id:
                raise RuntimeError("a row of another tenant cannot be written in this session")


def utc(dt: datetime | None) -> datetime | None:
    if dt is not None and dt.tzinfo is None:
        return dt.replace(tzinfo=timezone.utc)
    return dt


__all__ = [
    "JSON",
    "String",
    "TenantOwned",
    "UTCDateTime",
    "get_engine",
    "id_field",
    "json_field",
    "new_id",
    "on_commit_each",
    "session_scope",
    "time_field",
]
