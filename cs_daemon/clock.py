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
