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
    ts = now.timestamp()
    window = int(ts // WINDOW)
    try:
        counted = cache.incr_later(f"rl:{key}:{window}", WINDOW * 2)
    except Exception as exc:  # the cache being down must not take the API down
        log.warning("rate limit not applied, cache unreachable: %s", exc)
        counted = _none

    def verdict(limit: int) -> Verdict:
        try:
            count = counted()
        except Exception as exc:
            log.warning("rate limit not applied, cache unreachable: %s", exc)
            count = 0
        reset_at = (window + 1) * WINDOW
        return Verdict(
            allowed=count <= limit,
            limit=limit,
            remaining=max(0, limit - count),
            reset_at=reset_at,
            retry_after=max(1, int(reset_at - ts + 0.999)),
        )
    return verdict


def _none() -> int:
    return 0
