"""Where the client gets its time and how it waits.

A clock has three methods: `now()` (an aware UTC datetime, for event timestamps),
`monotonic()` (seconds, for batching and retry schedules) and `wait_until(condition,
deadline)` (block on a held `threading.Condition` until notified or until `monotonic()`
reaches `deadline`; `None` waits for a notification only). Every wait in the client goes
through `wait_until`, so a `ManualClock` lets a test move time by hand and never sleep.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Callable, Optional


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def monotonic(self) -> float:
        return time.monotonic()

    def wait_until(self, condition: threading.Condition, deadline: Optional[float]) -> None:
        if deadline is None:
            condition.wait()
        else:
            condition.wait(max(0.0, deadline - time.monotonic()))


class ManualClock:
    """A clock that moves only when `advance` is called (for tests).

    `wait_for_sleeper` blocks the caller (in real time, bounded) until some thread is
    waiting on this clock having seen its current time, and returns that thread's deadline:
    a test can thus know that the client has done all it would do before time moves."""

    def __init__(self, start: Optional[datetime] = None, monotonic: float = 1000.0):
        self._start = start or datetime(2026, 1, 1, tzinfo=timezone.utc)
        self._origin = monotonic
        self._t = monotonic
        self._generation = 0
        self._lock = threading.Condition()
        self._sleepers: dict[object, tuple[Optional[float], int, threading.Condition]] = {}

    def now(self) -> datetime:
        with self._lock:
            return self._start + timedelta(seconds=self._t - self._origin)

    def monotonic(self) -> float:
        with self._lock:
            return self._t

    def wait_until(self, condition: threading.Condition, deadline: Optional[float]) -> None:
        token = object()
        with self._lock:
            if deadline is not None and deadline <= self._t:
                return
            self._sleepers[token] = (deadline, self._generation, condition)
            self._lock.notify_all()
        try:
            # The caller holds `condition`, and `advance` notifies it only after taking it,
            # so a wake-up between registering and waiting cannot be lost.
            condition.wait()
        finally:
            with self._lock:
                del self._sleepers[token]

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go back")
        with self._lock:
            self._t += seconds
            self._generation += 1
            conditions = {id(c): c for _, _, c in self._sleepers.values()}
        for condition in conditions.values():
            with condition:
                condition.notify_all()

    def wait_for_sleeper(self, accept: Callable[[Optional[float]], bool] = lambda deadline: True,
                         timeout: float = 5.0) -> Optional[float]:
        """The deadline of a thread waiting since the last `advance` and accepted by
        `accept(deadline)`; AssertionError after `timeout` real seconds."""
        def found():
            return [d for d, generation, _ in self._sleepers.values()
                    if generation == self._generation and accept(d)]

        with self._lock:
            if not self._lock.wait_for(found, timeout):
                raise AssertionError(f"no thread waited on the clock within {timeout} s")
            deadlines = found()
        finite = [d for d in deadlines if d is not None]
        return min(finite) if finite else None
