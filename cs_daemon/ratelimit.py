"""Per-key request limits: a fixed one-minute window counted in the cache store, so every
API process sharing the cache shares the count (decisions §2)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from .cache import Cache

log = logging.getLogger(__name__)
WINDOW = 60


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    limit: int
    remaining: int
    reset_at: int  # unix seconds when the window ends
    retry_after: int

    def headers(self) -> dict[str, str]:
        headers = {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Reset": str(self.reset_at),
        }
        if not self.allowed:
            headers["Retry-After"] = str(self.retry_after)
        return headers


def hit(cache: Cache, key: str, limit: int, now: datetime) -> Verdict:
    """Count one request of `key` and judge it against `limit` a minute."""
    return start(cache, key, now)(limit)


def start(cache: Cache, key: str, now: datetime) -> Callable[[int], Verdict]:
    """Count one request of `key` now; the returned function judges it once the limit is
    known, and must be called (it finishes the count's round trip)."""
    try:
        counted = cache.incr_later(*counter(key, now))
    except Exception as exc:  # the cache being down must not take the API down
        log.warning("rate limit not applied, cache unreachable: %s", exc)
        counted = _none

    def verdict(limit: int) -> Verdict:
        try:
            count = counted()
        except Exception as exc:
            log.warning("rate limit not applied, cache unreachable: %s", exc)
            count = 0
        return judge(count, limit, now)
    return verdict


def counter(key: str, now: datetime) -> tuple[str, int]:
    """The cache counter of `key` for the window of `now`, and its time to live."""
    return f"rl:{key}:{int(now.timestamp() // WINDOW)}", WINDOW * 2


def judge(count: int, limit: int, now: datetime) -> Verdict:
    """The verdict on a request that is the `count`th of its window."""
    ts = now.timestamp()
    reset_at = (int(ts // WINDOW) + 1) * WINDOW
    return Verdict(
        allowed=count <= limit,
        limit=limit,
        remaining=max(0, limit - count),
        reset_at=reset_at,
        retry_after=max(1, int(reset_at - ts + 0.999)),
    )


def _none() -> int:
    return 0
