"""Per-key request limits: a fixed one-minute window counted in the cache store, so every
API process sharing the cache shares the count (docs/api.md, "Rate limits"). The count is taken by
auth/admission.py, in the round trip that also checks the key memo."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

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

