"""Time comes from a clock object so expiries and schedules are testable without sleeping."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone


class Clock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)


class FakeClock(Clock):
    """A clock that stands still until moved; for tests."""

    def __init__(self, start: datetime | None = None):
        self._now = start or datetime(2026, 1, 1, tzinfo=timezone.utc)

    def now(self) -> datetime:
        return self._now

    def advance(self, **delta) -> datetime:
        self._now += timedelta(**delta)
        return self._now


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def in_utc(value: datetime) -> datetime:
    """A time a client sent, in UTC (one without an offset is UTC). Python reads offsets up
    to ±23:59, PostgreSQL only ±15:59: converted here, every offset ISO 8601 allows is
    stored. ValueError for a time that leaves the calendar once in UTC (year 1 or 9999)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError("the time is out of range in UTC") from None
