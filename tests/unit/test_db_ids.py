"""db.new_ids: the ids of a batch of events, made in one go."""

import uuid

from cs_daemon.db import new_ids


def test_new_ids_are_distinct_version_4_uuids_as_new_id_writes_them():
    ids = new_ids(500)
    assert len(set(ids)) == 500
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and str(parsed) == text
    assert new_ids(0) == []


def test_new_ids_keep_every_random_bit_random():
    # all 122 bits other than the version and variant take both values over 500 ids
    # (a bit fixed by mistake would be the same in all: odds 2**-499 by chance)
    values = [uuid.UUID(text).int for text in new_ids(500)]
    fixed = {127 - b for b in (48, 49, 50, 51, 64, 65)}   # the version nibble, the variant bits
    for bit in range(128):
        seen = {v >> bit & 1 for v in values}
        assert len(seen) == (1 if bit in fixed else 2), bit


def test_a_fault_of_the_statement_on_sqlite_is_not_the_database_away():
    """`too many SQL variables` was answered 503 database_unavailable, hiding a 500's cause."""
    import sqlite3

    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    from cs_daemon import db

    engine = create_engine("sqlite://")
    with engine.connect() as conn:
        try:
            conn.exec_driver_sql("SELECT " + ",".join(["?"] * 400_000), tuple(range(400_000)))
        except OperationalError as exc:
            statement = exc
        try:
            conn.execute(text("SELECT * FROM nowhere"))
        except OperationalError as exc:
            missing = exc
    assert not db.unreachable(statement) and not db.unreachable(missing)
    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorname = "SQLITE_BUSY"
    assert db.unreachable(OperationalError("SELECT 1", {}, busy))
