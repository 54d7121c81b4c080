"""Units of work with and without a transaction (cs_daemon/db.py; docs/deploy.md,
"Database connections"): a unit without one (`atomic=False`: GETs, delivery claims and
records) runs on an engine whose connections stay in autocommit, so no pooled connection
is switched in and out of autocommit at each checkout."""

from __future__ import annotations

from cs_daemon.db import in_autocommit


def _autocommit(raw) -> bool:
    """psycopg's flag, or sqlite3's (no isolation level: no implicit BEGIN)."""
    return raw.autocommit if hasattr(raw, "autocommit") else raw.isolation_level is None


def test_a_unit_without_a_transaction_runs_on_connections_that_stay_in_autocommit(rt):
    with rt.session(atomic=False) as s:
        conn = s.connection()
        assert in_autocommit(conn)
        alone = conn.connection.dbapi_connection
        assert _autocommit(alone)
    assert _autocommit(alone)          # given back as it was: nothing switched it back
    with rt.session() as s:
        conn = s.connection()
        assert not in_autocommit(conn)
        assert conn.connection.dbapi_connection is not alone and not _autocommit(conn.connection.dbapi_connection)


def test_a_unit_without_a_transaction_commits_each_statement_at_once(rt, make_tenant):
    from sqlalchemy import select, update

    from cs_daemon.tenants.models import Tenant

    tenant = make_tenant("Alone")
    with rt.session(atomic=False) as s:
        s.execute(update(Tenant).where(Tenant.id == tenant.id).values(name="Renamed"))
        with rt.session() as other:       # another connection sees it before this unit ends
            assert other.scalar(select(Tenant.name).where(Tenant.id == tenant.id)) == "Renamed"


def test_every_postgresql_session_runs_in_utc_whatever_the_servers_zone(pg_url):
    """A server (here the URL's own startup option) whose default zone is not UTC: both
    pools' sessions are in UTC, so times come back in psycopg's own UTC zone."""
    from datetime import timezone

    from sqlalchemy import text

    from cs_daemon.config import Settings
    from cs_daemon.db import autocommit_engine, get_engine

    settings = Settings(database_url=f"{pg_url}?options=-c%20TimeZone%3DAsia/Kolkata", redis_url=None,
                        cs_secret_key="t")
    for engine in (get_engine(settings), autocommit_engine(settings)):
        try:
            with engine.connect() as conn:
                zone, now = conn.execute(text("SELECT current_setting('TimeZone'), now()")).one()
                with conn.connection.driver_connection.cursor() as cur:   # as ingest reads its rows
                    raw = cur.execute("SELECT now()").fetchone()[0]
        finally:
            engine.dispose()
        assert zone == "UTC"
        assert now.tzinfo is timezone.utc and raw.tzinfo is timezone.utc
